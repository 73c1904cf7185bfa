import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { relabelRunMembers } from '../../activities/runs/runWorkflows';
import { sessionActivities } from '../../activities/sessions';
import { temporalRunWorkflows } from '../../temporal/runWorkflows';
import {
  RUN_STATUS_KEY,
  qaSettled,
  runState,
  runTerminalized,
  runWorkflowId,
  stageApproved,
  type RunSnapshot,
} from '../../workflows/definitions';
import { json, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startSshHost, type SshHost } from '../helpers/sshd';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { until } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;
let r: DeploymentRunActivities;
let stage: HttpTarget;
let prod: HttpTarget;
let app: SshHost;

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  [stage, prod, app] = await Promise.all([startHttpTarget(), startHttpTarget(), startSshHost('app')]);
  const definition = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url });
  // production is deployed over SSH on a real host: the command records the served revision
  const release = definition.flows[0]!;
  (release.stages[3] as { action: object }).action = {
    ssh: { host: 'app', command: `echo {{candidate}} > ${join(app.dir, 'served')}` },
  };
  Object.assign(definition, {
    hosts: [
      {
        name: 'app',
        host: app.host,
        port: app.port,
        user: app.user,
        credential: app.credential,
        host_key_file: app.hostKeyFile,
      },
    ],
  });
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(definition) });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'driver' });
  r = deploymentRunActivities({ db: t.db });
}, 60_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close(), app.stop()]);
  await w.shutdown();
  await t.drop();
});

async function startRun(sha: string, key: string, items = ['WEB-1']) {
  const run = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: sha,
    idempotencyKey: key,
    items,
  });
  await r.executeRun({ sessionId: 'd1', runId: run.run_id });
  const handle = await w.client.workflow.start('deploymentRun', {
    workflowId: runWorkflowId(run.run_id),
    taskQueue: w.taskQueue,
    args: [{ runId: run.run_id }],
  });
  return { run, handle };
}

const waitingFor = (handle: { query: (q: typeof runState) => Promise<RunSnapshot> }, what: string) =>
  until(
    () => handle.query(runState),
    (s) => s.waitingFor === what,
    `the run to wait for ${what}`,
  );

test('O1 R1 a run is a workflow that walks deploy, QA, approval and deploy stages, recording its cursor in Postgres', async () => {
  const sha = 'c0ffee0000000001';
  const { run, handle } = await startRun(sha, 'walk');
  await waitingFor(handle, 'qa');
  expect(stage.deploys).toContain(sha); // the HTTP deploy reached the real target
  const atQa = await r.getRun({ runId: run.run_id });
  expect(atQa).toMatchObject({
    status: 'executing',
    current_stage: 'stage-qa',
    cursor_ordinal: 1,
    driver: { session_id: 'd1' },
    occupancy: { occupying: true },
  });
  expect(atQa.stages!.map((s) => s.status)).toEqual(['passed', 'waiting', 'pending', 'pending']);

  await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'smoke-test', status: 'passed' });
  await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'WEB-1/checkout-e2e', status: 'passed' });
  await handle.signal(qaSettled);
  await waitingFor(handle, 'approval');
  // QA settled: the run no longer occupies its origins while it waits for approval (O1)
  expect((await r.getRun({ runId: run.run_id })).occupancy).toMatchObject({ occupying: false, open_lines: [] });

  await r.approveStage({ sessionId: 'd1', runId: run.run_id, stage: 'signoff' });
  await handle.signal(stageApproved, { stage: 'signoff' });
  expect(await handle.result()).toEqual({ status: 'succeeded' });
  expect(readFileSync(join(app.dir, 'served'), 'utf8').trim()).toBe(sha); // the SSH deploy ran on the host
  const done = await r.getRun({ runId: run.run_id });
  expect(done).toMatchObject({ status: 'succeeded', settling_at: expect.any(String) });
  expect(done.stages!.map((s) => s.status)).toEqual(['passed', 'passed', 'passed', 'passed']);
  const started = await t.db
    .selectFrom('events')
    .select('payload')
    .where('event_type', '=', 'DeploymentRunStageStarted')
    .execute();
  expect(started.filter((e) => e.payload.run_id === run.run_id).map((e) => e.payload.stage)).toEqual([
    'deploy-stage',
    'stage-qa',
    'signoff',
    'deploy-production',
  ]);
}, 60_000);

test('O4 a failed deploy fails the run and retracts its unsettled requirements; retry resumes and terminalize stops the workflow', async () => {
  stage.status = 500;
  const { run, handle } = await startRun('bad0000000000002', 'fail');
  expect(await handle.result()).toEqual({ status: 'failed' });
  const failed = await r.getRun({ runId: run.run_id });
  expect(failed).toMatchObject({
    status: 'failed',
    terminal_reason: expect.stringContaining('stage deploy-stage failed'),
  });
  expect(failed.stages![0]).toMatchObject({
    status: 'failed',
    detail: expect.stringContaining('-> 500 (expected 200)'),
  });
  expect(failed.qa!.every((q) => q.retracted === 'automatic')).toBe(true);

  stage.status = 200;
  await r.retryRun({ sessionId: 'd1', runId: run.run_id });
  expect((await r.getRun({ runId: run.run_id })).qa!.every((q) => q.retracted === null)).toBe(true);
  const again = await w.client.workflow.start('deploymentRun', {
    workflowId: runWorkflowId(run.run_id),
    taskQueue: w.taskQueue,
    args: [{ runId: run.run_id }],
  });
  await waitingFor(again, 'qa');
  expect(stage.deploys).toContain('bad0000000000002');
  await r.terminalizeRun({
    sessionId: 'd1',
    runId: run.run_id,
    disposition: 'cancelled',
    reason: 'superseded by a hotfix',
  });
  await again.signal(runTerminalized, { status: 'cancelled' });
  expect(await again.result()).toEqual({ status: 'cancelled' });
  expect((await r.getRun({ runId: run.run_id })).stages!.map((s) => s.status)).toEqual([
    'passed',
    'cancelled',
    'cancelled',
    'cancelled',
  ]);
  void handle;
}, 60_000);

test('Q4 O1 removing the member that owed the last obligation moves the run on by itself: the members signal wakes the wait, no safety re-read', async () => {
  const { run, handle } = await startRun('feed000000000007', 'remove-last', ['WEB-2']);
  const runId = run.run_id;
  await waitingFor(handle, 'qa');
  // the run's own check passes (no qaSettled sent): WEB-2's item QA still holds the stage
  await r.recordQaVerdict({ sessionId: 'd1', runId, checkName: 'smoke-test', status: 'passed' });
  await r.removeItem({ sessionId: 'd1', runId, item: 'WEB-2', reason: 'not ready' });
  // what the CLI does after remove-item commits
  expect(
    await relabelRunMembers(t.db, runId, (id, labels) =>
      temporalRunWorkflows(w.client, w.taskQueue).membersChanged(id, labels),
    ),
  ).toEqual({ relabelled: true });
  await waitingFor(handle, 'approval');
  expect((await r.getRun({ runId })).occupancy).toMatchObject({ occupying: false, open_lines: [] });
  await r.terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'next scenario' });
  await handle.signal(runTerminalized, { status: 'cancelled' });
  expect(await handle.result()).toEqual({ status: 'cancelled' });
}, 60_000);

test('S1 a run whose settlement is blocked reads settling in get, watch and YokeRunStatus; watch exits 0 only once it succeeded', async () => {
  // every stage walked in-process; the workflow only settles, and WEB-2's item QA is unanswered
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'c0ffee0000000051',
    idempotencyKey: 'settling',
    items: ['WEB-2'],
  });
  const runId = created.run_id;
  await r.executeRun({ sessionId: 'd1', runId });
  const plan = await r.loadRunPlan({ runId });
  for (const s of plan.stages) {
    await r.beginStage({ runId, ordinal: s.ordinal, walk: plan.walk });
    await r.finishStage({ runId, ordinal: s.ordinal, walk: plan.walk, result: { ok: true, detail: 'walked' } });
  }
  await r.recordQaVerdict({ sessionId: 'd1', runId, checkName: 'smoke-test', status: 'passed' });
  const handle = await w.client.workflow.start('deploymentRun', {
    workflowId: runWorkflowId(runId),
    taskQueue: w.taskQueue,
    args: [{ runId }],
  });
  await until(
    async () => (await handle.describe()).typedSearchAttributes.get(RUN_STATUS_KEY),
    (label) => label === 'settling',
    'YokeRunStatus to read settling',
  );
  // the label goes up as the walk reaches settlement; settling_at is recorded by its first step
  const settling = await until(
    () => r.getRun({ runId }),
    (v) => v.settling === true,
    'the run to read settling',
  );
  expect(settling).toMatchObject({ status: 'executing', settling: true });

  const env = { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: w.taskQueue };
  const watching = yoke(t.url, ['deployment-runs', 'watch', runId, '--json', '--session', 'd1'], env);
  // watch is still following the settling run: answer the blocker, and it ends with the run
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  await r.recordQaVerdict({ sessionId: 'd1', runId, checkName: 'WEB-2/gift-smoke', status: 'passed' });
  await handle.signal(qaSettled);
  expect(await handle.result()).toEqual({ status: 'succeeded' });
  const watched = await watching;
  expect(watched.code).toBe(0);
  const lines = watched.stdout
    .trim()
    .split('\n')
    .map((l) => json({ code: 0, stdout: l, stderr: '' }) as { status: string; settling: boolean });
  expect(lines[0]).toMatchObject({ status: 'executing', settling: true });
  expect(lines[lines.length - 1]).toMatchObject({ status: 'succeeded' });
  expect((await handle.describe()).typedSearchAttributes.get(RUN_STATUS_KEY)).toBe('succeeded');
}, 120_000);
