import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { testMachineActivities } from '../../activities/testMachines';
import { qaExecutionWorkflowId } from '../../workflows/definitions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke, type CliResult } from '../helpers/cli';
import { releaseDefinition, releaseRunArgs, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startSshHost, type SshHost } from '../helpers/sshd';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { until } from '../helpers/until';

/**
 * Journeys a QA runner and an operator drive through the built CLI (audit round D5): what
 * each says while an execution cannot move on, and that an ended case's command stops.
 */
let t: TestDatabase;
let w: TestWorker;
let stage: HttpTarget;
let prod: HttpTarget;
let lab: SshHost;
let env: Record<string, string>;
let runId: string;
const run = (args: string[]) => yoke(t.url, args, env);

function ok(r: CliResult): CliResult {
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  return r;
}

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db, { reservationLifetimeMs: 60_000, commandTimeoutMs: 600_000 });
  [stage, prod, lab] = await Promise.all([startHttpTarget(), startHttpTarget(), startSshHost('lab')]);
  env = {
    TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!,
    YOKE_TASK_QUEUE: w.taskQueue,
    YOKE_SESSION_ID: 'd1',
  };
  // The shared release definition, its QA stage answered by a plan whose case runs until stopped
  // (it names its shell's pid, so the test sees it end on the machine).
  const definition = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url });
  definition.flows[0]!.stages[1] = { ...definition.flows[0]!.stages[1]!, checks: [{ name: 'suite', plan: 'long' }] };
  definition.plans.push({
    id: 'long',
    cases: [
      {
        name: 'soak',
        automatic: { test_machine: 'lab', command: `echo $$ > ${lab.dir}/pid-{{execution_id}}; sleep 300` },
      } as never,
    ],
  });
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(definition) });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'driver', project: 'web' });
  await testMachineActivities({ db: t.db }).addTestMachine({
    name: lab.name,
    host: lab.host,
    port: lab.port,
    user: lab.user,
    credential: lab.credential,
    hostKeyFile: lab.hostKeyFile,
  });
  const created = json(ok(await run([...releaseRunArgs('d5d5000000000001', 'audd5'), '--json'])));
  runId = created.run_id;
  ok(await run(['deployment-runs', 'execute', runId, '--json']));
}, 300_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close(), lab.stop()]);
  await w.shutdown();
  await t.drop();
});

const begin = async () =>
  json(ok(await run(['qa', 'begin', '--run', runId, '--stage', 'stage-qa', '--plan', 'long', '--json'])))
    .execution_id as number;
const alive = (pid: number) => existsSync(`/proc/${pid}`);

test('W9 issue 11: qa abort of an execution whose case runs stops the command on its machine within seconds (it ran 24 s on after the machine was released to the line)', async () => {
  const id = await begin();
  const pidFile = join(lab.dir, `pid-${id}`);
  const pid = await until(
    async () => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) : 0),
    (p) => p > 0 && alive(p),
    'the case command to run on the machine',
  );
  // Past the activity's first heartbeat (sent at once): later ones were held back 24 s, and the
  // cancellation reaches the command only with a heartbeat's answer.
  await new Promise((r) => setTimeout(r, 5_000));
  ok(await run(['qa', 'abort', String(id), '--reason', 'stop the soak']));
  const aborted = Date.now();
  await until(
    async () => alive(pid),
    (a) => !a,
    'the aborted case command to end on the machine',
    { timeoutMs: 10_000 },
  );
  expect(Date.now() - aborted).toBeLessThan(10_000);
  const machine = json(ok(await run(['test-machine', 'list', '--json']))).find((m: any) => m.name === 'lab');
  expect(machine.holder ?? null).toBeNull();
}, 120_000);

test('W3 W8 issue 11: an execution waiting in an unhealthy machine line says why and names test-machine verify (qa get, qa watch and its timeout), not "it goes on without you"', async () => {
  await lab.stop();
  const id = await begin();
  const view = await until(
    async () => json(ok(await run(['qa', 'get', String(id), '--json']))),
    (v) => v.unhealthy_machine !== null,
    'the execution to wait in the unhealthy line',
  );
  expect(view.unhealthy_machine).toEqual({
    test_machine: 'lab',
    reason: 'ssh_unavailable',
    recovery: 'yoke test-machine verify lab once it answers again (a successful verify serves its line)',
  });
  expect(ok(await run(['qa', 'get', String(id)])).stdout).toContain(
    'lab is unhealthy (ssh_unavailable): nothing serves its line but a successful verify: yoke test-machine verify lab',
  );
  const watched = await run(['qa', 'watch', String(id), '--timeout', '2']);
  expect(watched.code).toBe(3);
  expect(watched.stdout).toContain('lab is unhealthy (ssh_unavailable)');
  expect(watched.stderr).toContain('recovery: yoke test-machine verify lab once it answers again');
  expect(watched.stderr).not.toContain('it goes on without you');

  // The recovery it names works: the machine back, a verify serves the line and the case runs.
  await lab.start();
  ok(await run(['test-machine', 'verify', 'lab']));
  const served = await until(
    async () => json(ok(await run(['qa', 'get', String(id), '--json']))),
    (v) => v.held_claim_id !== null,
    'the verify to serve the waiting execution',
  );
  expect(served.unhealthy_machine).toBeNull();
  ok(await run(['qa', 'abort', String(id), '--reason', 'done']));
}, 180_000);

test('issue 11 doctor: a running execution whose workflow is gone is named running_execution_has_live_workflow with a runnable abort-and-begin recovery; qa watch names the same begin', async () => {
  const id = await begin();
  await until(
    async () => json(ok(await run(['qa', 'get', String(id), '--json']))).held_claim_id,
    (held) => held !== null,
    'the execution to hold its machine',
  );
  await w.client.workflow.getHandle(qaExecutionWorkflowId(id)).terminate('lost, for the test');
  const beginAgain = `yoke qa begin --run ${runId} --stage stage-qa --plan long`;
  const sick = await run(['doctor', '--json']);
  expect(sick.code).toBe(1);
  expect(jsonError(sick).details.violations).toContainEqual({
    invariant: 'running_execution_has_live_workflow',
    subject: `execution ${id}`,
    message: expect.stringContaining(`workflow ${qaExecutionWorkflowId(id)} is terminated; it holds claim`),
    recovery: `yoke qa abort ${id} --reason "workflow lost" (releases what it holds), then ${beginAgain}`,
  });
  const watched = await run(['qa', 'watch', String(id), '--json']);
  expect(watched.code).toBe(3);
  expect(jsonError(watched)).toMatchObject({ code: 'execution_workflow_not_running' });
  expect(jsonError(watched).recovery).toContain(`then begin again: ${beginAgain}`);

  ok(await run(['qa', 'abort', String(id), '--reason', 'workflow lost']));
  expect((await run(['doctor'])).code).toBe(0);
}, 180_000);

test('R1 issue 4: deployment-runs watch does not ask for an approval already recorded on a stage still waiting', async () => {
  ok(await run(['deployment-runs', 'qa-verdict', runId, '--check', 'suite', '--status', 'passed']));
  await until(
    async () => json(ok(await run(['deployment-runs', 'get', runId, 'stages', '--json']))).stages[2].status,
    (s) => s === 'waiting',
    'the run to wait at signoff',
  );
  const asks = await run(['deployment-runs', 'watch', runId, '--timeout', '1']);
  expect(asks.stdout).toContain(`approve with: yoke deployment-runs approve ${runId} --stage signoff`);
  // Recorded, and not yet taken by the run (as while no worker runs): the stage still reads waiting.
  await sql`UPDATE deployment_run_stages
                SET approved_by_actor_id = 'driver', approved_by_session_id = 'd1', approved_at = now(),
                    detail = 'approved by driver (session d1)'
              WHERE run_id = ${runId} AND name = 'signoff'`.execute(t.db);
  const approved = await run(['deployment-runs', 'watch', runId, '--timeout', '1']);
  expect(approved.stdout).toMatch(/signoff\s+approval waiting {2}approved by driver/);
  expect(approved.stdout).not.toContain('approve with:');
}, 120_000);
