import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { runWorkflowActivities } from '../../activities/runs/runWorkflows';
import { temporalRunWorkflows } from '../../temporal/runWorkflows';
import { sessionActivities } from '../../activities/sessions';
import type { YokeError } from '../../domain/errors';
import { formatHostKey, parseHostKeyText } from '../../domain/hostKeys';
import {
  RUN_STATUS_KEY,
  runState,
  runWorkflowId,
  stageApproved,
  runTerminalized,
  type RunSnapshot,
} from '../../workflows/definitions';
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
let other: SshHost;
/** Set by a test to act inside the next stage read, after its Postgres read and before it answers. */
let duringStageRead: (() => Promise<void>) | undefined;

function definition(over: { stages?: (d: ReturnType<typeof releaseDefinition>) => void } = {}) {
  const d = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url });
  Object.assign(d, {
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
  d.flows.push({
    name: 'ssh-deploy',
    stages: [
      { name: 'deploy-app', kind: 'deploy', target: 'stage', action: { ssh: { host: 'app', command: 'true' } } },
    ],
  } as never);
  over.stages?.(d);
  return d;
}

beforeAll(async () => {
  t = await createTestDatabase();
  // Workflow ids are run ids; keep this file's apart from other test databases on the shared server.
  await sql`SELECT setval('deployment_run_numbers', ${randomInt(1_000_000, 1_000_000_000)})`.execute(t.db);
  w = await startTestWorker(t.db, {
    wrap: (acts) => ({
      ...acts,
      stageWait: async (input) => {
        const seen = await acts.stageWait(input);
        const act = duringStageRead;
        duringStageRead = undefined;
        await act?.();
        return seen;
      },
    }),
  });
  [stage, prod, app, other] = await Promise.all([
    startHttpTarget(),
    startHttpTarget(),
    startSshHost('app'),
    startSshHost('other'),
  ]);
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(definition()) });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'driver' });
  r = deploymentRunActivities({ db: t.db });
}, 60_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close(), app.stop(), other.stop()]);
  await w.shutdown();
  await t.drop();
});

let keys = 0;
/** Creates and executes a run in Postgres; its workflow starts as the CLI starts it. */
async function executed(flow = 'release', items = ['WEB-1']) {
  const run = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow,
    target: 'stage',
    candidate: `c0ffee${String(++keys).padStart(10, '0')}`,
    idempotencyKey: `k${keys}`,
    items,
  });
  return r.executeRun({ sessionId: 'd1', runId: run.run_id });
}

async function walking(flow = 'release', items = ['WEB-1']) {
  const run = await executed(flow, items);
  const { ensureRunWorkflow } = await import('../../temporal/runWorkflows');
  await ensureRunWorkflow(w.client, w.taskQueue, run);
  return { run, handle: w.client.workflow.getHandle(runWorkflowId(run.run_id)) };
}

type Handle = ReturnType<TestWorker['client']['workflow']['getHandle']>;
const state = (h: Handle) => h.query(runState) as Promise<RunSnapshot>;
const waitingFor = (h: Handle, what: string) =>
  until(
    () => state(h),
    (s) => s.waitingFor === what,
    `a wait for ${what}`,
  );
const runStatusLabel = async (h: Handle) => (await h.describe()).typedSearchAttributes.get(RUN_STATUS_KEY);

const pinnedKey = (host: SshHost) =>
  formatHostKey(parseHostKeyText(readFileSync(host.hostKeyFile, 'utf8'), host.hostKeyFile));

async function expectFailedCleanly(runId: string, reason: RegExp) {
  const run = await r.getRun({ runId });
  expect(run.status).toBe('failed');
  expect(run.terminal_reason).toMatch(reason);
  expect(run.stages!.find((s) => s.status === 'failed')!.detail).toMatch(reason);
  expect(run.qa!.filter((q) => q.status === 'pending').every((q) => q.retracted === 'automatic')).toBe(true);
  expect(run.occupancy!.occupying).toBe(false);
}

test('issue 10 an SSH deploy refused host_key_mismatch fails the stage and the run with its reason, naming the deploy host and its host_key_file; YokeRunStatus reads failed', async () => {
  await sql`UPDATE deploy_hosts SET host_key = ${pinnedKey(other)} WHERE name = 'app'`.execute(t.db);
  try {
    const { run, handle } = await walking('ssh-deploy', []);
    expect(await handle.result()).toEqual({ status: 'failed' });
    await expectFailedCleanly(run.run_id, /host_key_mismatch/);
    // The recovery is the project definition's, not `yoke test-machine` (app is no test machine).
    const detail = (await r.getRun({ runId: run.run_id })).stages!.find((s) => s.status === 'failed')!.detail;
    expect(detail).toMatch(/deploy host app .*host_key_file.*yoke apply -f FILE/);
    expect(detail).not.toMatch(/test-machine|test machine/);
    expect(await runStatusLabel(handle)).toBe('failed');
  } finally {
    await sql`UPDATE deploy_hosts SET host_key = ${pinnedKey(app)} WHERE name = 'app'`.execute(t.db);
  }
});

test('I13 an SSH deploy whose credential the worker has no key for fails the stage and the run naming credential_unknown', async () => {
  await sql`UPDATE deploy_hosts SET credential = 'no-such-key' WHERE name = 'app'`.execute(t.db);
  try {
    const { run, handle } = await walking('ssh-deploy', []);
    expect(await handle.result()).toEqual({ status: 'failed' });
    await expectFailedCleanly(run.run_id, /credential_unknown/);
  } finally {
    await sql`UPDATE deploy_hosts SET credential = ${app.credential} WHERE name = 'app'`.execute(t.db);
  }
});

test('a deploy step failing with a plain error is recorded once as internal_error, not retried', async () => {
  const run = await executed('ssh-deploy', []);
  await sql`UPDATE deploy_hosts SET name = 'app-renamed' WHERE name = 'app'`.execute(t.db); // the row the step reads is gone
  try {
    const { ensureRunWorkflow } = await import('../../temporal/runWorkflows');
    await ensureRunWorkflow(w.client, w.taskQueue, run);
    const handle = w.client.workflow.getHandle(runWorkflowId(run.run_id));
    expect(await handle.result()).toEqual({ status: 'failed' });
    await expectFailedCleanly(run.run_id, /internal_error/);
  } finally {
    await sql`UPDATE deploy_hosts SET name = 'app' WHERE name = 'app-renamed'`.execute(t.db);
  }
});

test('a verdict signal that arrives while the QA wait reads Postgres is not lost (the mark comes before the read)', async () => {
  const { run, handle } = await walking();
  await waitingFor(handle, 'qa');
  // Inside the next read, after it found QA pending: the verdicts land and their signal arrives.
  duringStageRead = async () => {
    await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'smoke-test', status: 'passed' });
    await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'WEB-1/checkout-e2e', status: 'passed' });
    await handle.signal('qaSettled');
  };
  await handle.signal('qaSettled'); // wakes the wait into that read
  // Without the fix the wait sleeps through its 10-minute safety re-read; with it, it re-reads at once.
  await waitingFor(handle, 'approval');
  await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'cancelled', reason: 'done testing' });
  await handle.signal(runTerminalized, { status: 'cancelled' });
  expect(await handle.result()).toEqual({ status: 'cancelled' });
});

test('the approval wait honours the run status: a run terminalized without a signal ends at the next wake-up', async () => {
  const { run, handle } = await walking();
  await waitingFor(handle, 'qa');
  await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'smoke-test', status: 'passed' });
  await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'WEB-1/checkout-e2e', status: 'passed' });
  await handle.signal('qaSettled');
  await waitingFor(handle, 'approval');
  // terminalized in Postgres; its signal never came (the CLI died after the commit)
  await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'cancelled', reason: 'lost signal' });
  await handle.signal(stageApproved, { stage: 'signoff' }); // any wake-up
  expect(await handle.result()).toEqual({ status: 'cancelled' });
  expect(await runStatusLabel(handle)).toBe('cancelled');
});

test('terminalize cancels a running deploy: the request is abandoned, the workflow ends and YokeRunStatus reads cancelled', async () => {
  stage.delayMs = 120_000;
  try {
    const before = stage.received;
    const { run, handle } = await walking();
    await until(
      async () => stage.received,
      (n) => n > before,
      'the deploy to reach the slow target',
    );
    await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'cancelled', reason: 'wrong build' });
    await handle.signal(runTerminalized, { status: 'cancelled' });
    expect(await handle.result()).toEqual({ status: 'cancelled' });
    await until(
      async () => stage.abandoned,
      (n) => n > 0,
      'the deploy request to be abandoned',
    );
    expect(await runStatusLabel(handle)).toBe('cancelled');
    expect((await r.getRun({ runId: run.run_id })).stages![0]!.status).toBe('cancelled');
  } finally {
    stage.delayMs = 0;
  }
});

test('O4 retry is one transaction: a refused restart leaves the run failed with its retractions in place', async () => {
  stage.status = 500;
  const { run, handle } = await walking();
  expect(await handle.result()).toEqual({ status: 'failed' });
  stage.status = 200;
  const holder = await executed('hotfix', []); // takes the stage origin meanwhile
  const refused = await r.retryRun({ sessionId: 'd1', runId: run.run_id }).catch((e: YokeError) => e);
  expect((refused as YokeError).code).toBe('target_occupied');
  const after = await r.getRun({ runId: run.run_id });
  expect(after.status).toBe('failed');
  expect(after.qa!.filter((q) => q.retracted === 'automatic').length).toBeGreaterThan(0);
  expect(after.stages![0]!.status).toBe('failed');
  await r.terminalizeRun({ sessionId: 'd1', runId: holder.run_id, disposition: 'cancelled', reason: 'test over' });
});

test('O4 retry while the old workflow is alive starts a new workflow run for the new walk; the old one stops owning the cursor', async () => {
  const { run, handle } = await walking();
  await waitingFor(handle, 'qa');
  const first = (await handle.describe()).runId;
  // failed in Postgres, its signal lost: the old workflow still waits at QA
  await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'failed', reason: 'flaky' });
  const retried = await r.retryRun({ sessionId: 'd1', runId: run.run_id });
  expect(retried.walk).toBe(run.walk + 1);
  const { ensureRunWorkflow } = await import('../../temporal/runWorkflows');
  expect(await ensureRunWorkflow(w.client, w.taskQueue, retried)).toBe('replaced');
  const latest = w.client.workflow.getHandle(runWorkflowId(run.run_id));
  const described = await latest.describe();
  expect(described.runId).not.toBe(first);
  expect((await w.client.workflow.getHandle(runWorkflowId(run.run_id), first).describe()).status.name).toBe(
    'TERMINATED',
  );
  await waitingFor(latest, 'qa');
  expect((await state(latest)).walk).toBe(retried.walk);
  await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'cancelled', reason: 'test over' });
  await latest.signal(runTerminalized, { status: 'cancelled' });
  expect(await latest.result()).toEqual({ status: 'cancelled' });
});

test('the reconciler starts the workflow of an executing run that has none, once', async () => {
  const run = await executed(); // the CLI died after the execute commit: no workflow
  const reconciler = runWorkflowActivities({ db: t.db, workflows: temporalRunWorkflows(w.client, w.taskQueue) });
  const first = await reconciler.reattachStrandedRuns();
  expect(first.reattached).toContainEqual(expect.objectContaining({ run_id: run.run_id, workflow: 'started' }));
  const handle = w.client.workflow.getHandle(runWorkflowId(run.run_id));
  await waitingFor(handle, 'qa');
  const again = await reconciler.reattachStrandedRuns();
  expect(again.reattached.map((x) => x.run_id)).not.toContain(run.run_id);
  expect(await reconciler.reattachRun({ runId: run.run_id })).toMatchObject({ workflow: 'running' });
  await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'cancelled', reason: 'test over' });
  await handle.signal(runTerminalized, { status: 'cancelled' });
  await handle.result();
  await expect(reconciler.reattachRun({ runId: run.run_id })).rejects.toMatchObject({ code: 'run_not_executing' });
});

test('pinned flow: an apply during a run (a deploy URL, an inserted and a removed stage) does not change what the run executes', async () => {
  const { run, handle } = await walking();
  await waitingFor(handle, 'qa');
  const moved = await startHttpTarget();
  try {
    await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
      file: writeDefinition(
        definition({
          stages: (d) => {
            const release = d.flows[0]!;
            const deployProd = release.stages[3] as { action: { http: { url: string } } };
            deployProd.action.http.url = `${moved.url}/deploy?sha={{candidate}}`;
            release.stages.splice(2, 1); // signoff removed
            release.stages.splice(2, 0, { name: 'inserted', kind: 'approval', target: 'production' } as never);
          },
        }),
      ),
    });
    await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'smoke-test', status: 'passed' });
    await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'WEB-1/checkout-e2e', status: 'passed' });
    await handle.signal('qaSettled');
    await waitingFor(handle, 'approval');
    expect((await state(handle)).stage).toBe('signoff');
    await r.approveStage({ sessionId: 'd1', runId: run.run_id, stage: 'signoff' });
    await handle.signal(stageApproved, { stage: 'signoff' });
    expect(await handle.result()).toEqual({ status: 'succeeded' });
    const done = await r.getRun({ runId: run.run_id });
    expect(done.stages!.map((s) => s.name)).toEqual(['deploy-stage', 'stage-qa', 'signoff', 'deploy-production']);
    expect(prod.deploys).toContain(done.candidate_sha);
    expect(moved.received).toBe(0);
  } finally {
    await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(definition()) });
    await moved.close();
  }
});

test('create refuses an item that does not exist (item_unknown) and a refused create writes nothing', async () => {
  const count = async () => {
    const [items, runs] = await Promise.all([
      t.db
        .selectFrom('backlog_items')
        .select(sql<number>`count(*)::int`.as('n'))
        .executeTakeFirstOrThrow(),
      t.db
        .selectFrom('deployment_runs')
        .select(sql<number>`count(*)::int`.as('n'))
        .executeTakeFirstOrThrow(),
    ]);
    return { items: items.n, runs: runs.n };
  };
  const before = await count();
  const refused = await r
    .createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'release',
      target: 'stage',
      candidate: 'abcdef1234567',
      idempotencyKey: 'typo',
      items: ['WEB-1', 'WEB-999'],
    })
    .catch((e: YokeError) => e);
  expect(refused).toMatchObject({
    code: 'item_unknown',
    message: 'no backlog item WEB-999 exists',
    recovery: expect.stringMatching(/yoke apply -f .*yoke claims item take WEB-999/),
  });
  // a refusal after the items resolve (an unknown flow) leaves no phantom item either
  await expect(
    r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'no-such-flow',
      target: 'stage',
      candidate: 'abcdef1234567',
      idempotencyKey: 'typo-2',
      items: ['WEB-1'],
    }),
  ).rejects.toMatchObject({ code: 'flow_not_found' });
  expect(await count()).toEqual(before);
});
