import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { testMachineActivities } from '../../activities/testMachines';
import { ensureRunWorkflow } from '../../temporal/runWorkflows';
import { qaExecutionWorkflowId } from '../../workflows/definitions';
import type { qaPlanExecution } from '../../workflows/qaPlanExecution';
import { startWorkerProcess, type WorkerProcess } from '../faults/services';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startSshHost, type SshHost } from '../helpers/sshd';
import { until } from '../helpers/until';

/**
 * Issue 10 / issue 11 W3, O4: a worker killed (kill -9) while a QA case's command runs is an
 * infrastructure failure. The case is never given an error verdict: it rejoins its machine's
 * line and runs again once a worker is back, and only the command's own result decides it; the
 * run's plan check and the run go on. The workers are real processes (the built dist/), so the
 * kill is a real one.
 */
let t: TestDatabase;
let r: DeploymentRunActivities;
let stage: HttpTarget;
let lab: SshHost;
let connection: Connection;
let client: Client;
let worker: WorkerProcess | undefined;
const taskQueue = `qa-worker-lost-${randomUUID()}`;
const home = mkdtempSync(join(tmpdir(), 'yoke-qa-worker-lost-'));

const workerEnv = (): NodeJS.ProcessEnv => ({
  DATABASE_URL: t.url,
  TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!,
  YOKE_TASK_QUEUE: taskQueue,
  YOKE_SWEEP_INTERVAL_SECONDS: '3600',
  YOKE_HOME: home,
});

beforeAll(async () => {
  t = await createTestDatabase();
  [stage, lab] = await Promise.all([startHttpTarget(), startSshHost('lab')]);
  const d = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: stage.url,
    prodUrl: 'https://web.example.test',
  });
  const release = d.flows.find((f) => f.name === 'release')!;
  const qa = (release.stages as { name: string; checks?: object[] }[]).find((s) => s.name === 'stage-qa')!;
  qa.checks = [{ name: 'plan-check', plan: 'PLAN-9' }];
  Object.assign(d, {
    plans: [
      ...d.plans,
      {
        id: 'PLAN-9',
        cases: [
          {
            name: 'suite',
            // Marks each start; the first run sleeps (the worker is killed then), a later one finds go.
            automatic: {
              test_machine: 'lab',
              command: `touch ${lab.dir}/started-$$; [ -f ${lab.dir}/go ] || sleep 45; echo ran {{commit}}`,
            },
          },
        ],
      },
    ],
  });
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(d) });
  for (const id of ['d1', 'w1']) await sessionActivities({ db: t.db }).registerSession({ sessionId: id, actorId: id });
  await testMachineActivities({ db: t.db }).addTestMachine({
    name: 'lab',
    host: lab.host,
    port: lab.port,
    user: lab.user,
    credential: lab.credential,
    hostKeyFile: lab.hostKeyFile,
  });
  r = deploymentRunActivities({ db: t.db });
  connection = await Connection.connect({ address: process.env.YOKE_TEST_TEMPORAL_ADDRESS! });
  client = new Client({ connection });
  worker = await startWorkerProcess(workerEnv());
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  await Promise.all([stage.close(), lab.stop()]);
  await connection?.close();
  await t.drop();
});

const starts = () => readdirSync(lab.dir).filter((f) => f.startsWith('started-')).length;
const execution = (id: number) =>
  t.db.selectFrom('qa_plan_executions').selectAll().where('execution_id', '=', id).executeTakeFirstOrThrow();

test('issue 10 W3 O4 a worker killed mid QA case: the case rejoins the line and runs again on the next worker; its real result decides it and the run goes on', async () => {
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'c0ffee0000000001',
    idempotencyKey: 'k1',
    items: [], // the stage waits on its plan check alone
  });
  const run = await r.executeRun({ sessionId: 'd1', runId: created.run_id });
  await ensureRunWorkflow(client, taskQueue, run);
  await until(
    () => r.getRun({ runId: run.run_id }),
    (v) => v.stages!.find((s) => s.name === 'stage-qa')?.status === 'waiting',
    'the run to wait at its QA stage',
  );
  const begun = await qaExecutionActivities({ db: t.db }).beginExecution({
    sessionId: 'w1',
    runId: run.run_id,
    stage: 'stage-qa',
    plan: 'PLAN-9',
  });
  const handle = await client.workflow.start<typeof qaPlanExecution>('qaPlanExecution', {
    workflowId: qaExecutionWorkflowId(begun.execution_id),
    taskQueue,
    args: [{ executionId: begun.execution_id, runId: begun.run_id, steps: begun.steps }],
  });
  await until(
    async () => starts(),
    (n) => n === 1,
    'the case command to run on lab',
    { timeoutMs: 120_000 },
  );

  await worker!.kill9(); // mid-command: the command never reports
  worker = undefined;
  writeFileSync(join(lab.dir, 'go'), ''); // a run from now on finishes at once
  worker = await startWorkerProcess(workerEnv());

  expect(await handle.result()).toMatchObject({ outcome: 'passed' });
  expect(starts()).toBe(2); // run again, not given a verdict for the lost run
  const view = await qaExecutionActivities({ db: t.db }).getExecution({ executionId: begun.execution_id });
  expect(view.status).toBe('passed');
  expect(view.steps[0]).toMatchObject({ name: 'suite', verdict: 'passed', exit_code: 0 });
  expect(view.held_claim_id).toBeNull();
  expect((await execution(begun.execution_id)).release_reason).not.toMatch(/could not continue/);
  // The interruption is on record, and the execution waited in the machine's line to run again.
  const interrupted = await t.db
    .selectFrom('events')
    .select('payload')
    .where('event_type', '=', 'QaPlanCaseInterrupted')
    .execute();
  expect(interrupted.map((e) => e.payload)).toEqual([
    expect.objectContaining({ execution_id: begun.execution_id, case: 'suite', test_machine: 'lab' }),
  ]);
  expect(String((interrupted[0]!.payload as { detail: string }).detail)).toMatch(/^worker_lost/);
  const waits = await t.db
    .selectFrom('qa_test_machine_waits')
    .selectAll()
    .where('qa_plan_execution_id', '=', begun.execution_id)
    .execute();
  expect(waits.map((w) => [w.state, w.rationale])).toEqual([['granted', expect.stringMatching(/^step_interrupted/)]]);
  // The plan check is answered passed, and the run moves on to its approval (not failed).
  const after = await until(
    () => r.getRun({ runId: run.run_id }),
    (v) => v.stages!.find((s) => s.name === 'signoff')?.status === 'waiting' || v.status !== 'executing',
    'the run to move past its QA stage',
  );
  expect(after.status).toBe('executing');
  expect(after.qa!.find((q) => q.check_name === 'plan-check')).toMatchObject({ status: 'passed' });
}, 300_000);
