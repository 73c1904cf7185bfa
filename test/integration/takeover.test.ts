import { sql, type Kysely, type RawBuilder } from 'kysely';
import { claimActivities } from '../../activities/claims';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import type { Database } from '../../db/database';
import * as occupancyOneSnapshot from '../../db/migrations/0025_occupancy_one_snapshot';
import * as occupancyLiveFirst from '../../db/migrations/0025_occupancy_one_snapshot_live_first';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines, refusalOf, services } from '../helpers/fixtures';
import { createTestRepository, type TestRepository } from '../helpers/git';
import { releaseDefinition, releaseRuns, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';

let t: TestDatabase;
let r: DeploymentRunActivities;
let qa: ReturnType<typeof qaExecutionActivities>;
let repo: TestRepository;
let stage: HttpTarget;

beforeAll(async () => {
  repo = createTestRepository();
  stage = await startHttpTarget();
});
afterAll(async () => {
  await stage.close();
});

beforeEach(async () => {
  t = await createTestDatabase();
  const d = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: stage.url,
    prodUrl: 'https://web.example.test',
  });
  const definition = {
    ...d,
    repository: repo.dir,
    plans: [
      ...d.plans,
      {
        id: 'suite',
        cases: [
          { name: 'e2e', automatic: { test_machine: 'lab-1', command: 'true' } },
          { name: 'confirm', manual: { instructions: 'confirm it' } },
        ],
      },
    ],
  };
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(definition) });
  const sessions = sessionActivities({ db: t.db });
  for (const id of ['d1', 'd2', 'w1', 'w2', 'w3']) await sessions.registerSession({ sessionId: id, actorId: id });
  await addTestMachines(services(t.db), ['lab-1']); // C3: the suite's automatic case holds a registered machine
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000, takeoverLockTimeoutMs: 5_000 });
  qa = qaExecutionActivities({ db: t.db });
});
afterEach(async () => {
  await t.drop();
});

const { createdRun, waitingRun } = releaseRuns(() => r);

/** Every row a takeover could write, to prove a refused one wrote nothing. */
async function snapshot(db: Kysely<Database>) {
  const all = async (table: string, order: string) =>
    (await sql.raw<Record<string, any>>(`SELECT * FROM ${table} ORDER BY ${order}`).execute(db)).rows;
  return {
    runs: await all('deployment_runs', 'run_id'),
    items: await all('deployment_run_items', 'run_id, item_id'),
    qa: await all('deployment_run_qa', 'run_id, check_name'),
    stages: await all('deployment_run_stages', 'run_id, ordinal'),
    occupancy: await all('deployment_run_occupancy', 'run_id, unit'),
    executions: await all('qa_plan_executions', 'execution_id'),
    results: await all('qa_plan_execution_results', 'execution_id, case_name'),
    claims: await all('work_claims', 'claim_id'),
    waits: await all('qa_test_machine_waits', 'wait_id'),
    events: await all('events', 'event_id'),
  };
}

test('T1 a run waiting on run-level QA transfers to a containing candidate, with no members at all', async () => {
  const pred = await waitingRun(repo.A);
  const succ = await createdRun(repo.C);
  const done = await r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ });
  expect(done).toMatchObject({
    predecessor_run_id: pred,
    successor_run_id: succ,
    predecessor_status: 'cancelled',
    containment: {
      contained: true,
      basis: 'git',
      predecessor_commit: repo.A,
      successor_commit: repo.C,
      source: repo.dir,
    },
    moved_members: [],
    moved_qa: ['smoke-test'],
  });
  expect(await r.getRun({ runId: succ, fields: ['supersedes_run_id', 'takeover_chain'] })).toMatchObject({
    supersedes_run_id: pred,
    takeover_chain: [pred, succ],
  });
  expect(await r.getRun({ runId: pred, fields: ['superseded_by_run_id', 'status'] })).toMatchObject({
    superseded_by_run_id: succ,
    status: 'cancelled',
  });
});

test('T1 a successor whose candidate does not contain the predecessor is refused naming both commits, writing nothing', async () => {
  const pred = await waitingRun(repo.B);
  const unrelated = await createdRun(repo.D);
  const older = await createdRun(repo.A);
  const before = await snapshot(t.db);
  const refused = await refusalOf(r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: unrelated }));
  expect(refused.code).toBe('takeover_candidate_not_contained');
  expect(refused.message).toContain(repo.B);
  expect(refused.message).toContain(repo.D);
  expect(refused.details).toMatchObject({ predecessor_commit: repo.B, successor_commit: repo.D, basis: 'git' });
  const backwards = await refusalOf(r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: older }));
  expect(backwards.details).toMatchObject({ predecessor_commit: repo.B, successor_commit: repo.A, contained: false });
  expect(await snapshot(t.db)).toEqual(before);
});

test('T1 a predecessor not waiting on QA is refused naming its status as it is: a succeeded run is never "settling", a created one is at no stage', async () => {
  const pred = await createdRun(repo.A);
  const succ = await createdRun(repo.C);
  const created = await refusalOf(r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ }));
  expect(created.code).toBe('takeover_predecessor_not_waiting');
  expect(created.message).toContain(`run ${pred} is created;`);
  // a run that settled keeps its settling_at: it is succeeded, not settling
  await sql`UPDATE deployment_runs SET status = 'succeeded', settling_at = now(), terminal_at = now() WHERE run_id = ${pred}`.execute(
    t.db,
  );
  const settled = await refusalOf(r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ }));
  expect(settled.code).toBe('takeover_predecessor_not_waiting');
  expect(settled.message).toContain(`run ${pred} is succeeded;`);
});

test('T3 an attestation naming other commits is refused containment_attestation_mismatch even where git answers for itself', async () => {
  const pred = await waitingRun(repo.A);
  const succ = await createdRun(repo.B);
  const before = await snapshot(t.db);
  const attestation = (predecessor_commit: string, successor_commit: string) => ({
    predecessor_commit,
    successor_commit,
    contained: true,
    attested_by: 'lane x',
  });
  const wrong = await refusalOf(
    r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ, attestation: attestation(repo.A, repo.D) }),
  );
  expect(wrong.code).toBe('containment_attestation_mismatch');
  // a sha shorter than 7 digits names no commit for sure
  const short = await refusalOf(
    r.takeoverRun({
      sessionId: 'd1',
      runId: pred,
      successorRunId: succ,
      attestation: attestation(repo.A.slice(0, 4), repo.B),
    }),
  );
  expect(short.code).toBe('containment_attestation_mismatch');
  expect(await snapshot(t.db)).toEqual(before);
});

test('T3 an unknown commit needs a relayed containment_attestation naming both commits', async () => {
  const pred = await waitingRun(repo.A);
  const succ = await createdRun('f00dfeed1234');
  const unknown = await refusalOf(r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ }));
  expect(unknown.code).toBe('containment_unknown');
  const wrong = await refusalOf(
    r.takeoverRun({
      sessionId: 'd1',
      runId: pred,
      successorRunId: succ,
      attestation: {
        predecessor_commit: repo.B,
        successor_commit: 'f00dfeed1234',
        contained: true,
        attested_by: 'lane',
      },
    }),
  );
  expect(wrong.code).toBe('containment_attestation_mismatch');
  const done = await r.takeoverRun({
    sessionId: 'd1',
    runId: pred,
    successorRunId: succ,
    attestation: {
      predecessor_commit: repo.A,
      successor_commit: 'f00dfeed1234',
      contained: true,
      attested_by: 'lane /w/x',
    },
  });
  expect(done.containment).toMatchObject({ basis: 'attestation', source: 'lane /w/x', contained: true });
});

test('T2 the takeover moves unclosed members, QA and executions with their lease and waits; closed members stay; occupancy passes; T3 a retry or execute of the predecessor answers run_superseded', async () => {
  const claims = claimActivities({ db: t.db });
  const pred = await waitingRun(repo.B, ['WEB-1', 'WEB-2']);
  await r.recordQaVerdict({ sessionId: 'd1', runId: pred, checkName: 'smoke-test', status: 'passed' });
  // WEB-2 was closed by an earlier settlement step: it keeps its history on the predecessor.
  await t.db
    .updateTable('deployment_run_items')
    .set({ closed_at: new Date() })
    .where('run_id', '=', pred)
    .where(
      'item_id',
      '=',
      (await t.db.selectFrom('backlog_items').select('item_id').where('number', '=', 2).executeTakeFirstOrThrow())
        .item_id,
    )
    .execute();
  const suite = await qa.beginExecution({ sessionId: 'w1', runId: pred, stage: 'stage-qa', plan: 'suite' });
  const turn = await qa.acquireHost({ executionId: suite.execution_id, ordinal: 0 });
  expect(turn).toMatchObject({ held: true });
  // two sessions wait in line for the machine the case holds
  for (const s of ['w2', 'w3'])
    await refusalOf(
      claims.acquireCoordinationClaim({ sessionId: s, key: 'QA_HOST:lab-1', join: { resumeCommand: `resume ${s}` } }),
    );
  const look = await qa.beginExecution({
    sessionId: 'w1',
    runId: pred,
    stage: 'stage-qa',
    plan: 'PLAN-7',
    item: 'WEB-1',
  });
  await qa.recordHumanVerdict({ executionId: look.execution_id, case: 'look', verdict: 'passed', sessionId: 'w1' });
  const before = await snapshot(t.db);
  const rollups = before.qa.filter((q) => q.run_id === pred && String(q.check_name).startsWith('WEB-1/'));

  const succ = await createdRun(repo.C);
  const done = await r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ });
  expect(done.moved_members).toEqual(['WEB-1']);
  expect(done.moved_executions).toEqual([suite.execution_id, look.execution_id]);
  expect(done.live_executions).toEqual([suite.execution_id, look.execution_id]);
  expect(done.occupancy_units.length).toBeGreaterThan(0);

  const after = await snapshot(t.db);
  // ids, owners, leases and the waiting line are untouched: only the owning run changed
  const exec = (s: typeof before, id: number) => s.executions.find((e) => e.execution_id === id)!;
  expect(exec(after, suite.execution_id)).toEqual({ ...exec(before, suite.execution_id), run_id: succ });
  expect(exec(after, suite.execution_id).held_claim_id).toBe(turn.held && turn.claim_id);
  expect(after.claims).toEqual(before.claims);
  expect(after.waits).toEqual(before.waits);
  expect(after.results).toEqual(before.results);
  // the members: WEB-1 moved with its selection and snapshot, WEB-2 stayed closed on the predecessor
  const member = (s: typeof before, run: string) => s.items.filter((m) => m.run_id === run).map((m) => m.item_id);
  expect(member(after, pred)).toHaveLength(1);
  const moved = after.items.find((m) => m.run_id === succ)!;
  const was = before.items.find((m) => m.run_id === pred && m.item_id === moved.item_id)!;
  expect({ ...moved, run_id: pred, delivered_source_sha: was.delivered_source_sha }).toEqual(was);
  // QA rows: run-level and WEB-1's moved with their status; WEB-2's stay
  const succQa = after.qa.filter((q) => q.run_id === succ);
  expect(succQa.find((q) => q.check_name === 'smoke-test')).toMatchObject({ status: 'passed', verdict_run_id: pred });
  expect(succQa.filter((q) => String(q.check_name).startsWith('WEB-1/'))).toEqual(
    rollups.map((q) => ({ ...q, run_id: succ })),
  );
  expect(after.qa.filter((q) => q.run_id === pred).every((q) => String(q.check_name).startsWith('WEB-2/'))).toBe(true);
  // the chain, and the carried attempt credits the run that recorded it
  const view = await r.getRun({ runId: succ });
  expect(view).toMatchObject({ supersedes_run_id: pred, takeover_chain: [pred, succ], occupancy: { occupying: true } });
  expect(view.qa_executions!.find((e) => e.execution_id === look.execution_id)).toMatchObject({
    cases: [{ case: 'look', verdict: 'passed', verdict_run_id: pred }],
  });
  // a verdict recorded after the move belongs to the successor
  await qa.recordHumanVerdict({ executionId: suite.execution_id, case: 'confirm', verdict: 'passed', sessionId: 'w1' });
  const got = await qa.getExecution({ executionId: suite.execution_id });
  expect(got.run_id).toBe(succ);
  expect(got.steps.find((s) => s.name === 'confirm')).toMatchObject({ verdict: 'passed', verdict_run_id: succ });
  expect((await qa.getExecution({ executionId: look.execution_id })).steps[0]).toMatchObject({ verdict_run_id: pred });

  // O1: the origin passed to the successor, whose rows the occupancy check reads (marked live)
  const marks = await sql<{ run_id: string; live: boolean }>`
    SELECT run_id, live FROM deployment_run_occupancy WHERE run_id IN (${pred}, ${succ})`.execute(t.db);
  expect(marks.rows.length).toBeGreaterThan(0);
  expect(marks.rows).toEqual(marks.rows.map(() => ({ run_id: succ, live: true })));
  // a third run cannot start there
  const third = await createdRun(repo.C);
  const occupied = await refusalOf(r.executeRun({ sessionId: 'd2', runId: third }));
  expect(occupied.code).toBe('target_occupied');
  expect(occupied.details).toMatchObject({ holder: { run_id: succ } });
  // O2 T2: the successor has deployed nothing yet: its line says it waits to execute, not that it deploys
  expect(occupied.details).toMatchObject({
    holder: { open_lines: [`waiting to execute, holding the origins of run ${pred} it took over`] },
  });
  // the check of 0022, of 0025 (one snapshot) and of 0025 started from the live rows name the
  // same holder; each migrates down and up
  const holder = async () => (await refusalOf(r.executeRun({ sessionId: 'd2', runId: third }))).details;
  await occupancyLiveFirst.down(t.db);
  await occupancyOneSnapshot.down(t.db);
  expect(await holder()).toMatchObject({ holder: { run_id: succ } });
  await occupancyOneSnapshot.up(t.db);
  expect(await holder()).toMatchObject({ holder: { run_id: succ } });
  await occupancyLiveFirst.up(t.db);
  // T3: the predecessor never redeploys; issue 14: retry and execute name its successor
  for (const restart of [r.retryRun, r.executeRun]) {
    expect(await refusalOf(restart({ sessionId: 'd1', runId: pred }))).toMatchObject({
      code: 'run_superseded',
      details: { run_id: pred, superseded_by_run_id: succ },
    });
  }
  expect((await refusalOf(r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: third }))).code).toBe(
    'run_superseded',
  );
  // T3: the successor still owes its own deploys and approvals
  await r.executeRun({ sessionId: 'd1', runId: succ });
  const plan = await r.loadRunPlan({ runId: succ });
  expect(plan.cursor).toBe(0);
  const stages = (await r.getRun({ runId: succ, fields: ['stages'] })).stages!;
  expect(stages.map((s) => s.status)).toEqual(['pending', 'pending', 'pending', 'pending']);
});

test('T3 a changed input refuses atomically and writes nothing', async () => {
  const pred = await waitingRun(repo.A, ['WEB-1', 'WEB-2']);
  const succ = await createdRun(repo.B);
  const prepared = await r.prepareTakeover({ predecessorRunId: pred, successorRunId: succ });
  await r.removeItem({ sessionId: 'd1', runId: pred, item: 'WEB-2', reason: 'next release' });
  const before = await snapshot(t.db);
  const refused = await refusalOf(r.commitTakeover(prepared, 'd1'));
  expect(refused.code).toBe('takeover_inputs_changed');
  expect(refused.details).toMatchObject({ changed: ['predecessor.unclosed_members'] });
  expect(await snapshot(t.db)).toEqual(before);
  // prepared again, it goes through
  await r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ });
});

test('T3 a failed successor that still owns inherited QA keeps its failed status and can be taken over again', async () => {
  const first = await waitingRun(repo.A, ['WEB-1']);
  const second = await createdRun(repo.B);
  await r.takeoverRun({ sessionId: 'd1', runId: first, successorRunId: second });
  await r.executeRun({ sessionId: 'd1', runId: second });
  await r.terminalizeRun({ sessionId: 'd1', runId: second, disposition: 'failed', reason: 'deploy broke' });
  const third = await createdRun(repo.C);
  const done = await r.takeoverRun({ sessionId: 'd1', runId: second, successorRunId: third });
  expect(done).toMatchObject({ predecessor_status: 'failed', moved_members: ['WEB-1'] });
  // O4's automatic retractions were only the failed run's: the successor owes those rows again
  const owed = (await r.getRun({ runId: third, fields: ['qa'] })).qa!;
  expect(owed.find((q) => q.check_name === 'smoke-test')).toMatchObject({ status: 'pending', retracted: null });
  expect((await r.getRun({ runId: third, fields: ['takeover_chain'] })).takeover_chain).toEqual([first, second, third]);
  expect((await refusalOf(r.retryRun({ sessionId: 'd1', runId: second }))).code).toBe('run_superseded');
});

/** Waits until `n` backends of this database wait on a lock (the event, not a sleep). */
async function lockWaiters(n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(t.db);
    if (rows[0]!.n >= n) return;
    await new Promise((res) => setTimeout(res, 10));
  }
  throw new Error(`never saw ${n} lock waiter(s)`);
}

/** Holds a row lock until released, so writers queue behind it in a known order. */
async function holdLock(lock: RawBuilder<unknown>) {
  const other = t.connect(1);
  let release!: () => void;
  let locked!: () => void;
  const isLocked = new Promise<void>((res) => (locked = res));
  const held = new Promise<void>((res) => (release = res));
  const done = other.transaction().execute(async (trx) => {
    await lock.execute(trx);
    locked();
    await held;
  });
  await isLocked;
  return async () => {
    release();
    await done;
  };
}

test.each([
  ['verdict first', 'predecessor'],
  ['takeover first', 'successor'],
] as const)(
  'T2 a takeover racing a verdict on the same execution (%s): the verdict lands once, under the run owning it at commit',
  async (order, owner) => {
    const pred = await waitingRun(repo.A, ['WEB-1']);
    const succ = await createdRun(repo.C);
    const look = await qa.beginExecution({
      sessionId: 'w1',
      runId: pred,
      stage: 'stage-qa',
      plan: 'PLAN-7',
      item: 'WEB-1',
    });
    const release = await holdLock(
      sql`SELECT 1 FROM qa_plan_executions WHERE execution_id = ${look.execution_id} FOR UPDATE`,
    );
    const verdict = () =>
      qa.recordHumanVerdict({ executionId: look.execution_id, case: 'look', verdict: 'passed', sessionId: 'w1' });
    const takeover = () => r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ });
    const [firstCall, secondCall] = order === 'verdict first' ? [verdict, takeover] : [takeover, verdict];
    const first = firstCall();
    await lockWaiters(1);
    const second = secondCall();
    await lockWaiters(2);
    await release();
    const [a, b] = await Promise.all([first, second]);
    expect(a).toBeTruthy();
    expect(b).toBeTruthy();
    const results = await t.db
      .selectFrom('qa_plan_execution_results')
      .selectAll()
      .where('execution_id', '=', look.execution_id)
      .execute();
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ verdict: 'passed', verdict_run_id: owner === 'predecessor' ? pred : succ });
    expect((await qa.getExecution({ executionId: look.execution_id })).run_id).toBe(succ);
  },
);

test('D4 start-for-item takes over the waiting run and does not enrol a moved item twice', async () => {
  const pred = await waitingRun(repo.B, ['WEB-1']);
  const rollupsBefore = await t.db
    .selectFrom('deployment_run_qa')
    .select(['check_name', 'status'])
    .where('run_id', '=', pred)
    .where('check_name', 'like', 'WEB-1/%')
    .orderBy('check_name')
    .execute();
  const made = await r.startForItem({ sessionId: 'd1', items: ['WEB-1', 'WEB-3'], candidate: repo.C, target: 'stage' });
  expect(made.takeover).toMatchObject({
    predecessor_run_id: pred,
    successor_run_id: made.run_id,
    moved_members: ['WEB-1'],
  });
  expect(made.member_items).toEqual(['WEB-1', 'WEB-3']);
  // D6: the moved member's obligation no stage targets is named, as a create naming it would
  expect(made.warnings).toContainEqual(
    expect.objectContaining({ code: 'obligation_not_targeted', item: 'WEB-1', declared_environment: 'production' }),
  );
  const memberships = await t.db.selectFrom('deployment_run_items').select(['run_id', 'item_id']).execute();
  expect(memberships.filter((m) => m.run_id === pred)).toEqual([]);
  expect(memberships.filter((m) => m.run_id === made.run_id)).toHaveLength(2);
  const rollupsAfter = await t.db
    .selectFrom('deployment_run_qa')
    .select(['check_name', 'status'])
    .where('run_id', '=', made.run_id)
    .where('check_name', 'like', 'WEB-1/%')
    .orderBy('check_name')
    .execute();
  expect(rollupsAfter).toEqual(rollupsBefore);
  expect((await r.getRun({ runId: pred, fields: ['superseded_by_run_id'] })).superseded_by_run_id).toBe(made.run_id);
});

test('D4 start-for-item with a candidate that does not contain the waiting run creates the run and names the skipped one', async () => {
  const pred = await waitingRun(repo.B, ['WEB-1']);
  const made = await r.startForItem({ sessionId: 'd1', items: ['WEB-3'], candidate: repo.D, target: 'stage' });
  expect(made.takeover).toBeNull();
  expect(made.takeover_skipped).toEqual([
    { run_id: pred, reason: expect.stringContaining('takeover_candidate_not_contained') },
  ]);
  expect(await r.getRun({ runId: pred, fields: ['superseded_by_run_id', 'status'] })).toMatchObject({
    superseded_by_run_id: null,
    status: 'executing',
  });
});

test('T3 the takeover waits for a held lock only as long as its bound, then refuses having written nothing', async () => {
  const pred = await waitingRun(repo.A, ['WEB-1']);
  const succ = await createdRun(repo.C);
  const bounded = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000, takeoverLockTimeoutMs: 200 });
  const prepared = await bounded.prepareTakeover({ predecessorRunId: pred, successorRunId: succ });
  const release = await holdLock(sql`SELECT 1 FROM deployment_runs WHERE run_id = ${pred} FOR UPDATE`);
  const before = await snapshot(t.db);
  const refused = await refusalOf(bounded.commitTakeover(prepared, 'd1'));
  await release();
  expect(refused.code).toBe('takeover_lock_timeout');
  expect(await snapshot(t.db)).toEqual(before);
  // T3: a takeover judged on a relayed attestation is repeated with it (without it, a project git
  // cannot read refuses containment_unknown)
  const attested = { ...prepared.containment, basis: 'attestation' as const, source: 'lane /tmp/checkout' };
  const repeat = bounded.busy({ ...prepared, containment: attested }).recovery;
  expect(repeat).toContain(`yoke deployment-runs takeover ${pred} --successor ${succ} --containment-attestation '`);
  expect(JSON.parse(repeat!.split("--containment-attestation '")[1]!.slice(0, -1))).toEqual({
    predecessor_commit: attested.predecessor_commit,
    successor_commit: attested.successor_commit,
    contained: true,
    attested_by: 'lane /tmp/checkout',
  });
});

test('T1 two takeovers of one run race: one wins; the loser is refused run_superseded naming the winner, writing nothing', async () => {
  const pred = await waitingRun(repo.A, ['WEB-1']);
  const first = await createdRun(repo.B);
  const second = await createdRun(repo.C);
  // both prepared (containment read) before either commits: the race the move transaction decides
  const [a, b] = [
    await r.prepareTakeover({ predecessorRunId: pred, successorRunId: first }),
    await r.prepareTakeover({ predecessorRunId: pred, successorRunId: second }),
  ];
  const again = await r.prepareTakeover({ predecessorRunId: pred, successorRunId: first });
  expect((await r.commitTakeover(a, 'd1')).successor_run_id).toBe(first);
  const before = await snapshot(t.db);
  const lost = await refusalOf(r.commitTakeover(b, 'd1'));
  expect(lost.code).toBe('run_superseded');
  expect(lost.details).toMatchObject({ superseded_by_run_id: first });
  expect(lost.message).toContain(first);
  // the same takeover committed twice (two clients, or a repeat): it is done, and says so
  const repeated = await refusalOf(r.commitTakeover(again, 'd1'));
  expect(repeated.code).toBe('run_superseded');
  expect(repeated.message).toContain('this takeover is done');
  expect(await snapshot(t.db)).toEqual(before);
});
