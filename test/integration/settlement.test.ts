import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { claimActivities } from '../../activities/claims';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { itemActivities } from '../../activities/items';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { commitSettlement } from '../../activities/settlement/commit';
import { effectsPendingRefusal } from '../../activities/settlement/effects';
import { takeEffect } from '../../db/settlementEffects';
import * as stageApprovals from '../../db/migrations/0020_stage_approvals';
import type { IssueTracker } from '../../activities/settlement/tracker';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines, refusalOf, services } from '../helpers/fixtures';
import { countStatements } from '../helpers/statements';
import { releaseDefinition, walkedRun as walkRun, writeDefinition } from '../helpers/runs';

let t: TestDatabase;
let r: DeploymentRunActivities;
let items: ReturnType<typeof itemActivities>;
/** A tracker that records what it was asked and fails an issue while its count of failures lasts. */
let tracked: number[];
let failures: Map<number, number>;
const SHA = 'a1b2c3d4e5f6';

function definition(over: { items?: object[]; flows?: object[] } = {}) {
  const d = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: 'http://stage.example.test',
    prodUrl: 'https://web.example.test',
  });
  return { ...d, items: over.items ?? d.items, flows: [...d.flows, ...(over.flows ?? [])] };
}

async function apply(def: object) {
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(def) });
}

beforeEach(async () => {
  t = await createTestDatabase();
  tracked = [];
  failures = new Map();
  const tracker: IssueTracker = {
    markDelivered: async (d) => {
      const left = failures.get(d.issue) ?? 0;
      if (left > 0) {
        failures.set(d.issue, left - 1);
        throw new Error('tracker unavailable');
      }
      tracked.push(d.issue);
      return 'closed';
    },
  };
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000, tracker: async () => tracker });
  items = itemActivities({ db: t.db });
  await apply(definition());
  const sessions = sessionActivities({ db: t.db });
  for (const id of ['d1', 'd2', 'w1']) await sessions.registerSession({ sessionId: id, actorId: id });
});
afterEach(async () => {
  await t.drop();
});

/** A release run of the given members, executed and walked through all its stages. */
async function walkedRun(members: string[], key = 'k1', candidate = SHA, flow = 'release') {
  return walkRun(r, {
    sessionId: 'd1',
    project: 'web',
    flow,
    target: 'stage',
    candidate,
    idempotencyKey: key,
    items: members,
  });
}

async function pass(runId: string, ...checks: string[]) {
  for (const checkName of checks) await r.recordQaVerdict({ sessionId: 'd1', runId, checkName, status: 'passed' });
}

/** QA and settlement activities whose notifier records what it was told: executions ended, runs poked. */
function recordingQa() {
  const ended: [number, string][] = [];
  const poked: string[] = [];
  const qaNotifier = {
    executionEnded: async (id: number, status: string) => void ended.push([id, status]),
    runQaSettled: async (run: string) => void poked.push(run),
  };
  return {
    ended,
    poked,
    qa: qaExecutionActivities({ db: t.db, qaNotifier, driverFreshMs: 60_000 }),
    settling: deploymentRunActivities({
      db: t.db,
      driverFreshMs: 60_000,
      tracker: async () => ({ markDelivered: async () => 'closed' }),
      qaNotifier,
    }),
  };
}

const statusOf = async (item: string) => (await items.getItem({ item })).status;

test('S1 settling_at is recorded while executing, and completion authority reads a settling run as delivered', async () => {
  const runId = await walkedRun(['WEB-2']);
  await pass(runId, 'smoke-test', 'WEB-2/gift-smoke');
  const before = await items.getItem({ item: 'WEB-2' });
  expect(before.completion_runs).toEqual([
    expect.objectContaining({ run_id: runId, status: 'executing', settling: false }),
  ]);
  // not yet settling: the done gate does not read the run as delivered
  expect(
    (await refusalOf(items.updateItem({ sessionId: 'd1', item: 'WEB-2', field: 'status', value: 'done' }))).code,
  ).toBe('done_gate_refused');
  await r.beginSettling({ runId });
  const settling = await r.getRun({ runId });
  expect(settling).toMatchObject({ status: 'executing', settling: true, settling_at: expect.any(String) });
  expect((await items.getItem({ item: 'WEB-2' })).completion_runs[0]).toMatchObject({ run_id: runId, settling: true });
  // the ordinary done write passes its gate against the settling run
  await expect(
    items.updateItem({ sessionId: 'd1', item: 'WEB-2', field: 'status', value: 'done' }),
  ).resolves.toMatchObject({
    status: 'done',
    completed_deliveries: [expect.objectContaining({ run: runId })],
  });
});

test('S3 the effects phase does not end a holder session that drives another live run, though its item claim was released', async () => {
  const claims = claimActivities({ db: t.db });
  await claims.takeItem({ sessionId: 'w1', item: 'WEB-1' });
  const runId = await walkedRun(['WEB-1', 'WEB-2']);
  // w1 also drives another run, created and not yet executed
  const other = await r.createRun({
    sessionId: 'w1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: SHA,
    idempotencyKey: 'k-other',
    items: [],
  });
  // w1 is recorded as its driver
  await t.db
    .updateTable('deployment_runs')
    .set({ driver_session_id: 'w1', driver_heartbeat_at: new Date() })
    .where('run_id', '=', other.run_id)
    .execute();
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e', 'WEB-2/gift-smoke');
  await expect(r.settleNow({ runId })).resolves.toMatchObject({ status: 'succeeded' });
  const holder = await t.db.selectFrom('sessions').selectAll().where('session_id', '=', 'w1').executeTakeFirstOrThrow();
  expect(holder).toMatchObject({ ended_at: null, end_reason: null });
});

test('S2 D7 the commit closes every member once, publishes completed_deliveries and releases the claims; the run then succeeds', async () => {
  const claims = claimActivities({ db: t.db });
  await claims.takeItem({ sessionId: 'w1', item: 'WEB-1' });
  const runId = await walkedRun(['WEB-1', 'WEB-2']);
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e', 'WEB-2/gift-smoke');
  const result = await r.settleNow({ runId });
  expect(result).toMatchObject({ status: 'succeeded', commit: { closed: ['WEB-1', 'WEB-2'], attributed: [] } });
  const web1 = await items.getItem({ item: 'WEB-1' });
  expect(web1).toMatchObject({ status: 'done', completion_run: runId });
  expect(web1.completed_deliveries).toEqual([
    {
      owner: 'web',
      member: 'WEB-1',
      run: runId,
      environment: 'stage',
      candidate: SHA,
      recorded_at: expect.any(String),
    },
  ]);
  expect(web1.delivery_evidence).toMatchObject({
    rung: { rung: 'released', run: runId, candidate: SHA },
    preflight: { run: runId, qa: [{ requirement_id: 'WEB-1/checkout-e2e', status: 'passed' }] },
  });
  const claim = await t.db
    .selectFrom('work_claims')
    .selectAll()
    .where('target_kind', '=', 'item')
    .executeTakeFirstOrThrow();
  expect(claim).toMatchObject({ release_reason: `delivered by run ${runId}`, released_at: expect.any(Date) });
  // the holder's session held nothing else: the effects phase ended it
  expect(
    (await t.db.selectFrom('sessions').selectAll().where('session_id', '=', 'w1').executeTakeFirstOrThrow()).end_reason,
  ).toBe(`settled: no claims left after run ${runId}`);
  // a replay closes nobody twice
  await expect(
    r.updateRunStatus({ sessionId: 'd1', runId, field: 'status', value: 'succeeded' }),
  ).resolves.toMatchObject({
    status: 'succeeded',
    replayed: true,
  });
  const done = await t.db.selectFrom('events').select('payload').where('event_type', '=', 'ItemDone').execute();
  expect(done.map((e) => e.payload.item).sort()).toEqual(['WEB-1', 'WEB-2']);
});

test('S2 the commit phase is set-based: as many statements for four members as for one, each closed once with its claims released', async () => {
  await apply(
    definition({ items: [...definition().items, { id: 'WEB-4' }, { id: 'WEB-5' }, { id: 'WEB-6' }, { id: 'WEB-7' }] }),
  );
  const claims = claimActivities({ db: t.db });
  const committed = async (members: string[], key: string) => {
    const runId = await walkedRun(members, key);
    await pass(runId, 'smoke-test');
    await r.beginSettling({ runId });
    const statements = await countStatements(t.url, (db) => commitSettlement(db, runId));
    await r.settleNow({ runId });
    return statements;
  };
  const one = await committed(['WEB-3'], 'one');
  for (const item of ['WEB-4', 'WEB-5', 'WEB-6']) await claims.takeItem({ sessionId: 'w1', item });
  const four = await committed(['WEB-4', 'WEB-5', 'WEB-6', 'WEB-7'], 'four');
  expect(four).toBe(one);
  for (const item of ['WEB-3', 'WEB-4', 'WEB-5', 'WEB-6', 'WEB-7']) {
    const v = await items.getItem({ item });
    expect([item, v.status, v.completed_deliveries.length]).toEqual([item, 'done', 1]);
  }
  const released = await t.db
    .selectFrom('work_claims')
    .select('release_reason')
    .where('target_kind', '=', 'item')
    .execute();
  expect(released.map((c) => c.release_reason)).toEqual(Array(3).fill(expect.stringMatching(/^delivered by run /)));
  expect(
    (await t.db.selectFrom('events').select('payload').where('event_type', '=', 'ItemDone').execute()).length,
  ).toBe(5);
});

test('S2 a refused member rolls back every member of the set: run_settlement_blocked names it, the rest are held', async () => {
  await walkedRun(['WEB-1', 'WEB-2']).then(async (runId) => {
    await pass(runId, 'smoke-test', 'WEB-2/gift-smoke'); // WEB-1/checkout-e2e stays pending
    await r.beginSettling({ runId });
    const refused = await refusalOf(r.updateRunStatus({ sessionId: 'd1', runId, field: 'status', value: 'succeeded' }));
    expect(refused.code).toBe('run_settlement_blocked');
    expect(refused.message).toMatch(
      new RegExp(
        `^run ${runId} cannot settle: blocked WEB-1 \\(blocking QA requirement WEB-1/checkout-e2e is pending\\); held with the run: WEB-2$`,
      ),
    );
    expect(refused.recovery).toContain(`yoke deployment-runs qa-verdict ${runId} --check WEB-1/checkout-e2e`);
    expect(refused.details).toMatchObject({
      blocked: [{ item: 'WEB-1', reasons: [{ code: 'done_gate_qa_open' }] }],
      held: ['WEB-2'],
    });
    // nobody closed: WEB-2 (cleared) is not done either
    expect(await statusOf('WEB-1')).toBe('open');
    expect(await statusOf('WEB-2')).toBe('open');
    expect(
      await t.db.selectFrom('deployment_run_items').select('closed_at').where('run_id', '=', runId).execute(),
    ).toEqual([{ closed_at: null }, { closed_at: null }]);
    expect((await r.getRun({ runId })).settlement).toMatchObject({
      committed_at: null,
      blocked: { code: 'run_settlement_blocked' },
    });
    // replay after the blocker settles
    await pass(runId, 'WEB-1/checkout-e2e');
    await expect(
      r.updateRunStatus({ sessionId: 'd1', runId, field: 'status', value: 'succeeded' }),
    ).resolves.toMatchObject({
      status: 'succeeded',
      commit: { closed: ['WEB-1', 'WEB-2'] },
    });
  });
});

test('S2 a member refused inside the commit transaction rolls back the members written before it', async () => {
  const runId = await walkedRun(['WEB-1', 'WEB-2']);
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e', 'WEB-2/gift-smoke');
  await r.beginSettling({ runId });
  // WEB-2's status write is refused at its own savepoint, after WEB-1's was written: the
  // database refuses it (a check constraint added for this test only)
  await t.db.schema
    .alterTable('backlog_items')
    .addCheckConstraint('test_no_done_web2', (await import('kysely')).sql`NOT (status = 'done' AND number = 2)`)
    .execute();
  await expect(r.commitRunSettlement({ runId })).rejects.toThrow(/test_no_done_web2/);
  expect(await statusOf('WEB-1')).toBe('open'); // written in its savepoint, rolled back with the set
  await t.db.schema.alterTable('backlog_items').dropConstraint('test_no_done_web2').execute();
  await expect(r.settleNow({ runId })).resolves.toMatchObject({ status: 'succeeded' });
});

test('S4 S5 settlement supersedes a resultless item-level execution of a member whose run-scoped QA is satisfied; one with a result keeps refusing until its end replays the settlement', async () => {
  const runId = await walkedRun(['WEB-1', 'WEB-2']);
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e', 'WEB-2/gift-smoke');
  const { ended, poked, qa, settling } = recordingQa();
  const idle = await qa.beginExecution({ sessionId: 'd1', runId, stage: 'stage-qa', plan: 'PLAN-7', item: 'WEB-1' });
  const started = await qa.beginExecution({ sessionId: 'd1', runId, stage: 'stage-qa', plan: 'PLAN-7', item: 'WEB-2' });
  await qa.recordHumanVerdict({ executionId: started.execution_id, case: 'look', verdict: 'passed', sessionId: 'd1' });

  const refused = await refusalOf(settling.settleNow({ runId }));
  expect(refused.code).toBe('run_settlement_blocked');
  expect(refused.details).toMatchObject({
    blocked: [{ item: 'WEB-2', reasons: [expect.objectContaining({ code: 'item_qa_execution_live' })] }],
    held: ['WEB-1'],
  });
  expect(refused.recovery).toContain(`yoke qa abort ${started.execution_id}`);
  const row = (id: number) =>
    t.db.selectFrom('qa_plan_executions').selectAll().where('execution_id', '=', id).executeTakeFirstOrThrow();
  expect(await row(idle.execution_id)).toMatchObject({
    status: 'superseded',
    release_reason: 'superseded-by-run-scoped-item-qa',
  });
  expect(ended).toContainEqual([idle.execution_id, 'superseded']); // its workflow is told to stop
  expect(await row(started.execution_id)).toMatchObject({ status: 'running' });
  expect(await statusOf('WEB-1')).not.toBe('done'); // the refusal rolled back every member

  // S5: the blocking execution's end pokes its settling run, whose replay now closes both.
  poked.length = 0;
  await qa.abortExecution({ sessionId: 'd1', executionId: started.execution_id, reason: 'covered at run scope' });
  expect(poked).toContain(runId);
  await expect(settling.settleNow({ runId })).resolves.toMatchObject({
    status: 'succeeded',
    commit: { closed: ['WEB-1', 'WEB-2'] },
  });
  expect([await statusOf('WEB-1'), await statusOf('WEB-2')]).toEqual(['done', 'done']);
});

test('O4 W9 a run that succeeds aborts its run-scoped executions still running (run_succeeded): their waits end and their workflows are told to stop', async () => {
  const runId = await walkedRun(['WEB-1']);
  const { ended, poked, qa, settling } = recordingQa();
  const running = await qa.beginExecution({ sessionId: 'd1', runId, stage: 'stage-qa', plan: 'PLAN-7' });
  // Its place in a test machine's line, as an automatic case that could not lease the machine.
  await addTestMachines(services(t.db), ['lab-1']);
  const holder = await claimActivities({ db: t.db }).acquireCoordinationClaim({
    sessionId: 'w1',
    key: 'QA_HOST:lab-1',
  });
  await refusalOf(
    claimActivities({ db: t.db }).acquireCoordinationClaim({
      sessionId: 'd1',
      key: 'QA_HOST:lab-1',
      join: { resumeCommand: 'resume', qaPlanExecutionId: running.execution_id },
    }),
  );
  // The run's QA is settled on its checks themselves, not through the execution.
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e');
  await expect(settling.settleNow({ runId })).resolves.toMatchObject({ status: 'succeeded' });
  expect(
    await t.db
      .selectFrom('qa_plan_executions')
      .select(['status', 'release_reason'])
      .where('execution_id', '=', running.execution_id)
      .executeTakeFirstOrThrow(),
  ).toEqual({ status: 'aborted', release_reason: 'run_succeeded' });
  expect(ended).toContainEqual([running.execution_id, 'aborted']);
  expect(poked).not.toContain(runId); // the run has ended: nothing to poke
  const waits = await t.db
    .selectFrom('qa_test_machine_waits')
    .select(['state', 'qa_plan_execution_id'])
    .where('test_machine', '=', 'lab-1')
    .execute();
  expect(waits).toEqual([{ state: 'cancelled', qa_plan_execution_id: running.execution_id }]);
  // The machine's holder releases it: nobody is served for the finished run.
  const released = await claimActivities({ db: t.db }).releaseWorkClaim({
    actingSessionId: 'w1',
    claimId: holder.claim.claim_id,
    reason: 'done',
  });
  expect(released.reservations).toEqual([]);
});

test("S5 an execution's end on another run retries the close-out of every settling run with the item as a member", async () => {
  const withCanary = definition({
    flows: [
      {
        name: 'canary-check',
        stages: [{ name: 'canary-qa', kind: 'qa', target: 'canary', scope: 'run', checks: [{ name: 'canary-smoke' }] }],
      },
    ],
  });
  await apply({
    ...withCanary,
    environments: [...withCanary.environments, { name: 'canary', url: 'http://canary.example.test', tier: 'stage' }],
  });
  const settlingRun = await walkedRun(['WEB-2']);
  await pass(settlingRun, 'smoke-test'); // WEB-2/gift-smoke stays pending: the run settles blocked
  await r.beginSettling({ runId: settlingRun });
  expect((await refusalOf(r.settleNow({ runId: settlingRun }))).code).toBe('run_settlement_blocked');
  const poked: string[] = [];
  const qaNotifier = {
    executionEnded: async () => undefined,
    runQaSettled: async (run: string) => void poked.push(run),
  };
  const qa = qaExecutionActivities({ db: t.db, qaNotifier, driverFreshMs: 60_000 });
  // another run carrying WEB-2 (on a canary host), at its QA stage with an item execution of WEB-2
  const other = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'canary-check',
    target: 'canary',
    candidate: 'b2c3d4e5f6a1',
    idempotencyKey: 'other',
    items: ['WEB-2'],
  });
  await r.executeRun({ sessionId: 'd1', runId: other.run_id });
  await r.beginStage({ runId: other.run_id, ordinal: 0, walk: 1 });
  const execution = await qa.beginExecution({
    sessionId: 'd1',
    runId: other.run_id,
    stage: 'canary-qa',
    plan: 'PLAN-7',
    item: 'WEB-2',
  });
  await qa.abortExecution({ sessionId: 'd1', executionId: execution.execution_id, reason: 'answered elsewhere' });
  expect(poked).toEqual(expect.arrayContaining([other.run_id, settlingRun]));
});

/** A run of WEB-2 walked to its approval stage, which now waits. */
async function atApproval(key: string) {
  const { run_id: runId } = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: SHA,
    idempotencyKey: key,
    items: ['WEB-2'],
  });
  await r.executeRun({ sessionId: 'd1', runId });
  const { stages } = await r.loadRunPlan({ runId });
  const signoff = stages.find((s) => s.kind === 'approval')!;
  for (const stage of stages) {
    await r.beginStage({ runId, ordinal: stage.ordinal, walk: 1 });
    if (stage === signoff) break;
    await r.finishStage({ runId, ordinal: stage.ordinal, walk: 1, result: { ok: true, detail: 'test' } });
  }
  const approval = () =>
    t.db
      .selectFrom('deployment_run_stages')
      .select(['approved_by_actor_id', 'approved_by_session_id', 'approved_at', 'detail'])
      .where('run_id', '=', runId)
      .where('ordinal', '=', signoff.ordinal)
      .executeTakeFirstOrThrow();
  return { runId, stages, signoff, approval };
}
test('R1 an approval is recorded in its own columns: the waiting stage passes, the preflight lists it approved, a retried walk asks again', async () => {
  const a = await atApproval('k-approved');
  // a detail line alone approves nothing
  await t.db
    .updateTable('deployment_run_stages')
    .set({ detail: 'approved by nobody' })
    .where('run_id', '=', a.runId)
    .where('ordinal', '=', a.signoff.ordinal)
    .execute();
  expect((await r.stageWait({ runId: a.runId, ordinal: a.signoff.ordinal })).result).toBeNull();
  await r.approveStage({ sessionId: 'd1', runId: a.runId, stage: a.signoff.name });
  expect(await a.approval()).toEqual({
    approved_by_actor_id: 'd1',
    approved_by_session_id: 'd1',
    approved_at: expect.any(Date),
    detail: 'approved by d1 (session d1)',
  });
  const waited = await r.stageWait({ runId: a.runId, ordinal: a.signoff.ordinal });
  expect(waited.result).toEqual({ ok: true, detail: 'approved by d1 (session d1)' });
  for (const stage of a.stages.filter((s) => s.ordinal >= a.signoff.ordinal)) {
    if (stage !== a.signoff) await r.beginStage({ runId: a.runId, ordinal: stage.ordinal, walk: 1 });
    const result = stage === a.signoff ? waited.result! : { ok: true, detail: 'test' };
    await r.finishStage({ runId: a.runId, ordinal: stage.ordinal, walk: 1, result });
  }
  await pass(a.runId, 'smoke-test', 'WEB-2/gift-smoke');
  await r.settleNow({ runId: a.runId });
  expect((await items.getItem({ item: 'WEB-2' })).delivery_evidence.preflight?.approvals).toEqual([
    { stage: 'signoff', approved: true },
  ]);

  // a failed run retried walks again: its approval stage waits for a new approval
  const b = await atApproval('k-retried');
  await r.approveStage({ sessionId: 'd1', runId: b.runId, stage: b.signoff.name });
  await r.failRun({ runId: b.runId, walk: 1, reason: 'test' });
  await r.retryRun({ sessionId: 'd1', runId: b.runId });
  expect(await b.approval()).toEqual({
    approved_by_actor_id: null,
    approved_by_session_id: null,
    approved_at: null,
    detail: null,
  });
});

test('R1 migration 0020 carries approvals over from their detail text', async () => {
  const a = await atApproval('k-migrated');
  await stageApprovals.down(t.db);
  await sql`UPDATE deployment_run_stages SET detail = 'approved by alice (session s-1)'
             WHERE run_id = ${a.runId} AND ordinal = ${a.signoff.ordinal}`.execute(t.db);
  await stageApprovals.up(t.db);
  expect(await a.approval()).toEqual({
    approved_by_actor_id: 'alice',
    approved_by_session_id: 's-1',
    approved_at: expect.any(Date),
    detail: 'approved by alice (session s-1)',
  });
  expect((await r.stageWait({ runId: a.runId, ordinal: a.signoff.ordinal })).result).toEqual({
    ok: true,
    detail: 'approved by alice (session s-1)',
  });
  // a stage whose detail approves nothing stays unapproved
  const others = await t.db
    .selectFrom('deployment_run_stages')
    .select('approved_by_actor_id')
    .where('run_id', '=', a.runId)
    .where('ordinal', '!=', a.signoff.ordinal)
    .execute();
  expect(others.every((o) => o.approved_by_actor_id === null)).toBe(true);
});

test('S6 success refuses while a final member still owes an unanswered post-deploy obligation, naming it', async () => {
  await apply(
    definition({
      items: [
        {
          id: 'WEB-5',
          obligations: [
            { case: 'stage-e2e', qa_phase: 'post_deploy', target_env: 'stage' },
            { case: 'prod-canary', qa_phase: 'post_deploy', target_env: 'production' },
          ],
        },
      ],
    }),
  );
  const runId = await walkedRun(['WEB-5']);
  await pass(runId, 'smoke-test', 'WEB-5/stage-e2e');
  const refused = await refusalOf(r.settleNow({ runId }));
  expect(refused.code).toBe('run_settlement_blocked');
  expect(refused.details.blocked).toEqual([
    {
      item: 'WEB-5',
      reasons: [
        expect.objectContaining({
          code: 'post_deploy_obligations_unanswered',
          message: 'post-deploy obligations unanswered: WEB-5/prod-canary (production)',
        }),
      ],
    },
  ]);
  expect((await r.getRun({ runId })).status).toBe('executing');
});

test('S3 an effect failing twice then succeeding is applied exactly once; the run stays settling until then', async () => {
  await apply(
    definition({
      items: [
        { id: 'WEB-1', issue: 41 },
        { id: 'WEB-2', issue: 42 },
      ],
    }),
  );
  const lane = mkdtempSync(join(tmpdir(), 'yoke-lane-'));
  writeFileSync(join(lane, 'file'), 'x');
  await items.updateItem({ sessionId: 'd1', item: 'WEB-1', field: 'lane', value: lane });
  const runId = await walkedRun(['WEB-1', 'WEB-2']);
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e', 'WEB-2/gift-smoke');
  failures.set(41, 2);
  const first = await r.settleNow({ runId });
  expect(first).toMatchObject({ status: 'executing', effects_pending: 1 });
  expect(first.effects.failed).toEqual([{ item: 'WEB-1', effect: 'tracker_sync', error: 'tracker unavailable' }]);
  expect(first.commit.closed).toEqual(['WEB-1', 'WEB-2']); // a failure never reopens a member
  expect(existsSync(lane)).toBe(false); // lane cleanup applied
  expect((await r.getRun({ runId })).settling).toBe(true);
  const second = await r.settleNow({ runId });
  expect(second).toMatchObject({ status: 'executing', commit: { already_committed: true } });
  const third = await r.settleNow({ runId });
  expect(third.status).toBe('succeeded');
  expect(third.effects.applied).toEqual([{ item: 'WEB-1', effect: 'tracker_sync', outcome: 'closed' }]);
  expect(tracked.sort()).toEqual([41, 42]);
  await r.settleNow({ runId });
  expect(tracked).toHaveLength(2);
  const effects = (await r.getRun({ runId })).settlement!.effects;
  expect(effects.filter((e) => e.applied_at)).toHaveLength(6);
});

test('D7 environment-specific dependencies need done plus attribution in that environment', async () => {
  await apply(
    definition({
      items: [
        { id: 'WEB-2', obligations: [] },
        { id: 'WEB-6', depends_on: [{ item: 'WEB-2' }] },
        { id: 'WEB-7', depends_on: [{ item: 'WEB-2', environment: 'production' }] },
      ],
    }),
  );
  const ready = (item: string) => items.updateItem({ sessionId: 'd1', item, field: 'status', value: 'delivery_ready' });
  expect((await refusalOf(ready('WEB-6'))).code).toBe('dependency_unsatisfied');
  const runId = await walkedRun(['WEB-2']);
  await pass(runId, 'smoke-test', 'WEB-2/gift-smoke');
  await r.settleNow({ runId });
  await expect(ready('WEB-6')).resolves.toMatchObject({ status: 'delivery_ready' });
  const refused = await refusalOf(ready('WEB-7'));
  expect(refused).toMatchObject({
    code: 'dependency_unsatisfied',
    message: 'WEB-7 depends on WEB-2 delivered to production',
  });
  // a later cancelled run cannot revoke the completed delivery
  const later = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'bbbbbbbb',
    idempotencyKey: 'k9',
    items: ['WEB-2'],
  });
  await r.terminalizeRun({ sessionId: 'd1', runId: later.run_id, disposition: 'cancelled', reason: 'test' });
  expect(await items.getItem({ item: 'WEB-2' })).toMatchObject({ status: 'done', completion_run: runId });
});

describe('completion authority and composition', () => {
  const stageOnly = {
    name: 'stage-check',
    delivery_custody: false,
    stages: [{ name: 'item-qa', kind: 'qa', target: 'stage', scope: 'item' }],
  };
  const custodyItemQa = {
    name: 'item-release',
    delivery_custody: true,
    stages: [{ name: 'item-qa', kind: 'qa', target: 'stage', scope: 'item' }],
  };

  test('D8 the walk reads the newest completion-flow membership, but a failed or cancelled run never shadows a live one', async () => {
    const first = await r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'release',
      target: 'stage',
      candidate: SHA,
      idempotencyKey: 'w1',
      items: ['WEB-2'],
    });
    const second = await r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'release',
      target: 'stage',
      candidate: 'cccccccc',
      idempotencyKey: 'w2',
      items: ['WEB-2'],
    });
    expect(await items.getItem({ item: 'WEB-2' })).toMatchObject({ completion_run: second.run_id });
    await r.terminalizeRun({ sessionId: 'd1', runId: second.run_id, disposition: 'cancelled', reason: 'duplicate' });
    const read = await items.getItem({ item: 'WEB-2' });
    expect(read.completion_run).toBe(first.run_id);
    expect(read.completion_runs.map((c) => [c.run_id, c.status])).toEqual([
      [second.run_id, 'cancelled'],
      [first.run_id, 'created'],
    ]);
    // a same-project run of another flow closes nothing and is not in the walk
    await r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'hotfix',
      target: 'stage',
      candidate: SHA,
      idempotencyKey: 'w3',
      items: ['WEB-2'],
    });
    expect((await items.getItem({ item: 'WEB-2' })).completion_runs).toHaveLength(2);
    const listed = await items.listItems({ project: 'web' });
    expect(listed.find((i) => i.item === 'WEB-2')).toMatchObject({ completion_run: first.run_id, status: 'open' });
  });

  test('D9 a custody-free flow with item-scoped QA refuses members: item_qa_flow_without_delivery_custody; at create the recovery drops the --item or names a custody flow, never a run that was not made', async () => {
    await apply(definition({ flows: [stageOnly] }));
    const refused = await refusalOf(
      r.createRun({
        sessionId: 'd1',
        project: 'web',
        flow: 'stage-check',
        target: 'stage',
        candidate: SHA,
        idempotencyKey: 'c1',
        items: ['WEB-2'],
      }),
    );
    expect(refused).toMatchObject({ code: 'item_qa_flow_without_delivery_custody' });
    expect(refused.message).toContain('WEB-2');
    expect(refused.recovery).toContain('--item WEB-2');
    expect(refused.recovery).toContain('delivery_custody: true');
    expect(refused.recovery).not.toMatch(/remove-item|run-\d/);
    expect(refused.details).not.toHaveProperty('run_id');
    expect(refused.recovery).toContain('--flow F');
    expect(await t.db.selectFrom('deployment_runs').selectAll().execute()).toEqual([]); // nothing written
  });

  test('D9 a memberless item-QA run owing delivery-ready items is refused; owing none, it names item_qa_no_member_owes_target', async () => {
    await apply(definition({ flows: [custodyItemQa], items: [{ id: 'WEB-2', completion_flow: 'item-release' }] }));
    const run = await r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'item-release',
      target: 'stage',
      candidate: SHA,
      idempotencyKey: 'm1',
      items: [],
    });
    await expect(r.validateRun({ runId: run.run_id })).resolves.toMatchObject({
      valid: true,
      results: [{ code: 'item_qa_no_member_owes_target', stage: 'item-qa' }],
    });
    await items.updateItem({ sessionId: 'd1', item: 'WEB-2', field: 'status', value: 'delivery_ready' });
    const refused = await refusalOf(r.validateRun({ runId: run.run_id }));
    expect(refused).toMatchObject({ code: 'item_qa_run_without_members', details: { owed: ['WEB-2'] } });
    // the pre-execution check refuses too, and nothing is occupied
    expect((await refusalOf(r.executeRun({ sessionId: 'd1', runId: run.run_id }))).code).toBe(
      'item_qa_run_without_members',
    );
    expect((await r.getRun({ runId: run.run_id })).status).toBe('created');
  });

  test('D9 a final-delivery release refuses a same-project final member it could not close: at create naming flow selection and never the run that was not made, at validate naming cancel', async () => {
    await apply(definition({ flows: [custodyItemQa], items: [{ id: 'WEB-2', completion_flow: 'item-release' }] }));
    const refused = await refusalOf(
      r.createRun({
        sessionId: 'd1',
        project: 'web',
        flow: 'release',
        target: 'stage',
        candidate: SHA,
        idempotencyKey: 'f1',
        items: ['WEB-2'],
      }),
    );
    expect(refused.code).toBe('final_member_not_closable');
    expect(refused.recovery).toContain("as WEB-2's completion_flow");
    expect(refused.recovery).toContain('without --item WEB-2');
    // its own completion flow, named: the command delivers it (the project default would refuse the same way)
    expect(refused.recovery).toContain('yoke deployment-runs start-for-item WEB-2 --flow item-release');
    // the refusal rolled the run back: nothing names it or acts on it
    expect(`${refused.message} ${refused.recovery}`).not.toMatch(/run-\d|remove-item|terminalize/);
    expect(refused.details).not.toHaveProperty('run_id');
    // a member the run can close is fine
    const made = await r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'release',
      target: 'stage',
      candidate: SHA,
      idempotencyKey: 'f2',
      items: ['WEB-1'],
    });
    expect(made.status).toBe('created');
    // once made, a member it can no longer close (its completion flow changed) names the run and cancel
    await apply(
      definition({
        flows: [custodyItemQa],
        items: [
          { id: 'WEB-1', completion_flow: 'item-release' },
          { id: 'WEB-2', completion_flow: 'item-release' },
        ],
      }),
    );
    const later = await refusalOf(r.validateRun({ runId: made.run_id }));
    expect(later).toMatchObject({ code: 'final_member_not_closable', details: { run_id: made.run_id } });
    expect(later.recovery).toContain(`terminalize ${made.run_id} --disposition cancelled`);
  });

  test("D10 a supplemental membership is credited only with the final run's commit, else add-item warns supplemental_proof_not_credited", async () => {
    const supplemental = {
      name: 'stage-proof',
      stages: [{ name: 'stage-qa', kind: 'qa', target: 'stage', scope: 'run' }],
    };
    await apply(definition({ flows: [supplemental] }));
    const final = await r.createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'release',
      target: 'stage',
      candidate: SHA,
      idempotencyKey: 's1',
      items: ['WEB-2'],
    });
    const other = await r.createRun({
      sessionId: 'd2',
      project: 'web',
      flow: 'stage-proof',
      target: 'stage',
      candidate: 'dddddddd',
      idempotencyKey: 's2',
      items: [],
    });
    const warned = await r.addItem({
      sessionId: 'd2',
      runId: other.run_id,
      item: 'WEB-2',
      requirementIds: [],
      planIds: [],
    });
    expect(warned.warnings).toEqual([
      expect.objectContaining({ code: 'supplemental_proof_not_credited', item: 'WEB-2' }),
    ]);
    expect(warned.warnings[0]!.message).toContain(`final run ${final.run_id} delivers ${SHA}`);
    const matching = await r.createRun({
      sessionId: 'd2',
      project: 'web',
      flow: 'stage-proof',
      target: 'stage',
      candidate: SHA,
      idempotencyKey: 's3',
      items: [],
    });
    const credited = await r.addItem({
      sessionId: 'd2',
      runId: matching.run_id,
      item: 'WEB-2',
      requirementIds: [],
      planIds: [],
    });
    expect(credited.warnings.filter((w) => w.code === 'supplemental_proof_not_credited')).toEqual([]);
  });
});

test('S3 S5 a replay that finds the effects leased by another settlement says so: settlement_effects_pending with nothing failed and the recovery of waiting', async () => {
  await apply(definition({ items: [{ id: 'WEB-1', issue: 41 }] }));
  const runId = await walkedRun(['WEB-1']);
  await pass(runId, 'smoke-test', 'WEB-1/checkout-e2e');
  const { item_id: itemId } = await t.db
    .selectFrom('backlog_items')
    .select('item_id')
    .where('number', '=', 1)
    .executeTakeFirstOrThrow();
  // another replay took the tracker sync's lease and is still applying it
  expect(await takeEffect(t.db, { runId, itemId, effect: 'tracker_sync' }, 60_000)).toBe(true);
  const out = await r.settleNow({ runId });
  expect(out).toMatchObject({ status: 'executing', effects_pending: 1 });
  expect(out.effects).toMatchObject({ failed: [], leased: [{ item: 'WEB-1', effect: 'tracker_sync' }] });
  const answer = effectsPendingRefusal(out.effects);
  expect(answer.code).toBe('settlement_effects_pending');
  expect(answer.message).toBe(
    `run ${runId} committed its settlement; its effects are being applied by another settlement (WEB-1 tracker_sync)`,
  );
  expect(answer.recovery).toContain(`yoke deployment-runs watch ${runId}`);
  expect(answer.recovery).not.toContain('fix the cause');
  expect(tracked).toEqual([]);
});

/** WEB-8 depends on WEB-6 being done; WEB-9 on WEB-6 delivered to stage. */
const dependents = definition({
  items: [
    { id: 'WEB-6', obligations: [] },
    { id: 'WEB-8', obligations: [], depends_on: [{ item: 'WEB-6' }] },
    { id: 'WEB-9', obligations: [], depends_on: [{ item: 'WEB-6', environment: 'stage' }] },
  ],
});

test('D7 issue 12 settlement holds a member whose dependency is unsatisfied, as delivery_ready does: run_settlement_blocked names dependency_unsatisfied with its recovery; validate warned first, and not once the run is cancelled', async () => {
  await apply(dependents);
  const runId = await walkedRun(['WEB-8', 'WEB-9']);
  const validated = await r.validateRun({ runId });
  expect(validated.warnings).toEqual([
    expect.objectContaining({ code: 'dependency_unsatisfied', item: 'WEB-8', depends_on: 'WEB-6', environment: null }),
    expect.objectContaining({
      code: 'dependency_unsatisfied',
      item: 'WEB-9',
      depends_on: 'WEB-6',
      environment: 'stage',
    }),
  ]);
  await pass(runId, 'smoke-test');
  const blocked = await refusalOf(r.settleNow({ runId }));
  expect(blocked.code).toBe('run_settlement_blocked');
  expect(blocked.message).toContain('WEB-8 depends on WEB-6 done');
  expect(blocked.message).toContain('WEB-9 depends on WEB-6 delivered to stage');
  expect(blocked.recovery).toContain('deliver WEB-6 first (yoke items get WEB-6)');
  expect(await statusOf('WEB-8')).not.toBe('done');
  expect(await statusOf('WEB-9')).not.toBe('done');
  const closure = (await r.getRun({ runId, includeMemberClosure: true })).member_closure!;
  expect(closure.members.find((m) => m.item === 'WEB-8')).toMatchObject({
    blocked: true,
    blocked_reasons: [expect.objectContaining({ code: 'dependency_unsatisfied' })],
    prerequisites: { dependencies: [expect.objectContaining({ item: 'WEB-6', satisfied: false })] },
  });
  // a cancelled run settles nothing: validate no longer says its settlement will hold a member
  await r.terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'not this one' });
  expect((await r.validateRun({ runId })).warnings.filter((w) => w.code === 'dependency_unsatisfied')).toEqual([]);
});

test('D7 issue 12 a dependency closing in the same settlement commit satisfies its dependents (all or none, S2)', async () => {
  await apply(dependents);
  const runId = await walkedRun(['WEB-6', 'WEB-8', 'WEB-9']);
  expect((await r.validateRun({ runId })).warnings.filter((w) => w.code === 'dependency_unsatisfied')).toEqual([]);
  await pass(runId, 'smoke-test');
  const settled = await r.settleNow({ runId });
  expect(settled.commit.closed.sort()).toEqual(['WEB-6', 'WEB-8', 'WEB-9']);
  for (const item of ['WEB-6', 'WEB-8', 'WEB-9']) expect(await statusOf(item)).toBe('done');
});
