import { sql } from 'kysely';
import { claimActivities } from '../../activities/claims';
import { claimViews } from '../../db/claims';
import * as claimUserTriggers from '../../db/migrations/0055_claim_user_triggers';
import * as claimUserTriggersFolded from '../../db/migrations/0061_claim_user_triggers_folded';
import * as leanPair from '../../db/migrations/0050_claimperf_lean_pair';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, seedLab, services, type Services } from '../helpers/fixtures';
import { counting } from '../helpers/statements';

let t: TestDatabase;
let s: Services;
const LAB = 'QA_HOST:lab-1';

beforeEach(async () => {
  t = await createTestDatabase();
  s = services(t.db, { reservationLifetimeMs: 60_000 });
  await seedLab(s);
});
afterEach(async () => {
  await t.drop();
});

const liveOn = (machine: string) =>
  t.db
    .selectFrom('work_claims')
    .select(['claim_id', 'session_id', 'reserved_until'])
    .where('key', '=', `QA_HOST:${machine}`)
    .where('released_at', 'is', null)
    .execute();

/** A holder's release by claim id, and how many statements it took. */
async function releaseCounted(actingSessionId: string, claimId: number) {
  const counter = counting();
  const result = await claimActivities({ db: t.db.withPlugin(counter) }).releaseWorkClaim({
    actingSessionId,
    claimId,
    reason: 'done',
  });
  return { ...result, statements: counter.count };
}

test('C3 W7 the common acquire and release are one statement each; a release with a waiter reserves in that statement', async () => {
  const counter = counting();
  const claims = claimActivities({ db: t.db.withPlugin(counter) });
  const held = await claims.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  expect(counter.count).toBe(1);
  counter.count = 0;
  const released = await claims.releaseWorkClaim({
    actingSessionId: 'w1',
    claimId: held.claim.claim_id,
    reason: 'done',
  });
  expect(counter.count).toBe(1);
  expect(released.claim).toMatchObject({
    released_at: expect.any(String),
    release_reason: 'done',
    released_by_session_id: 'w1',
  });
  expect(released.reservations).toEqual([]);

  // C3: a refusal names the holder from the same one statement.
  const again = await claims.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  counter.count = 0;
  const refused = await refusalOf(claims.acquireCoordinationClaim({ sessionId: 'w2', key: LAB }));
  expect(counter.count).toBe(1);
  expect(refused.code).toBe('claim_held');
  expect(refused.details.holder).toMatchObject({ claim_id: again.claim.claim_id, session_id: 'w1' });

  // W7: with someone in line, the same one statement reserves for the oldest live waiter,
  // and the waiter's next acquire consumes its turn (one more statement).
  const joined = await refusalOf(
    claims.acquireCoordinationClaim({ sessionId: 'w2', key: LAB, join: { resumeCommand: 'resume' } }),
  );
  expect(joined.details.wait).toMatchObject({ position: 1 });
  counter.count = 0;
  const served = await claims.releaseWorkClaim({
    actingSessionId: 'w1',
    claimId: again.claim.claim_id,
    reason: 'done',
  });
  expect(counter.count).toBe(1);
  expect(served.reservations).toEqual([expect.objectContaining({ session_id: 'w2', test_machine: 'lab-1' })]);
  expect(await liveOn('lab-1')).toEqual([
    expect.objectContaining({ session_id: 'w2', reserved_until: expect.any(Date) }),
  ]);
  expect((await s.listWaits({ testMachine: 'lab-1', all: true }))[0]).toMatchObject({
    session_id: 'w2',
    state: 'reserved',
  });
  counter.count = 0;
  const turn = await claims.acquireCoordinationClaim({ sessionId: 'w2', key: LAB });
  expect(counter.count).toBe(2);
  expect(turn).toMatchObject({ consumed_reservation: true, claim: { session_id: 'w2', reserved_until: null } });
  expect((await s.listWaits({ testMachine: 'lab-1', all: true }))[0]).toMatchObject({
    session_id: 'w2',
    state: 'granted',
  });
});

test('W7 race: a release racing a join never strands the joiner (it holds the machine or its turn is reserved)', async () => {
  for (let round = 0; round < 8; round++) {
    const holder = `h${round}`;
    const joiner = `j${round}`;
    await s.registerSession({ sessionId: holder, actorId: `holder-${round}`, project: 'web' });
    await s.registerSession({ sessionId: joiner, actorId: `joiner-${round}`, project: 'web' });
    const held = await s.acquireCoordinationClaim({ sessionId: holder, key: LAB });
    const [a, b] = [t.connect(1), t.connect(1)];
    await Promise.all([a, b].map((p) => p.selectFrom('projects').select('project_id').execute())); // connections open first
    const [join] = await Promise.allSettled([
      claimActivities({ db: a }).acquireCoordinationClaim({
        sessionId: joiner,
        key: LAB,
        join: { resumeCommand: 'resume' },
      }),
      claimActivities({ db: b }).releaseWorkClaim({
        actingSessionId: holder,
        claimId: held.claim.claim_id,
        reason: 'done',
      }),
    ]);
    await Promise.all([a.destroy(), b.destroy()]);
    expect(await liveOn('lab-1')).toEqual([expect.objectContaining({ session_id: joiner })]);
    if (join.status === 'fulfilled') {
      await s.releaseWorkClaim({ actingSessionId: joiner, claimId: join.value.claim.claim_id, reason: 'done' });
    } else {
      // Its turn is reserved: it consumes it, then gives the machine back.
      const turn = await s.acquireCoordinationClaim({ sessionId: joiner, key: LAB });
      expect(turn.consumed_reservation).toBe(true);
      await s.releaseWorkClaim({ actingSessionId: joiner, claimId: turn.claim.claim_id, reason: 'done' });
    }
  }
});

test('C3 the one-statement acquire keeps a generic plan that finds the holder through its kind’s partial index (planned once per connection)', async () => {
  const one = t.connect(1);
  const claims = claimActivities({ db: one });
  const held = await claims.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  expect((await refusalOf(claims.acquireCoordinationClaim({ sessionId: 'w2', key: LAB }))).code).toBe('claim_held');
  await claims.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
  // Postgres keeps a prepared statement's generic plan only while it costs no more than
  // planning afresh: a kind compared as a parameter hides the kind's partial index from the
  // generic plan, so once the table grew every acquire was planned again.
  const { rows } = await sql<{ name: string; n: number }>`
    SELECT name, cardinality(parameter_types) AS n FROM pg_prepared_statements
     WHERE statement LIKE '%INSERT INTO work_claims%'`.execute(one);
  expect(rows).toHaveLength(1);
  const plan = await one.connection().execute(async (c) => {
    try {
      await sql`SET plan_cache_mode = force_generic_plan`.execute(c);
      await sql`SET enable_seqscan = off`.execute(c);
      const nulls = sql.join(Array.from({ length: rows[0]!.n }, () => sql`NULL`));
      const explained = await sql<{
        'QUERY PLAN': string;
      }>`EXPLAIN EXECUTE ${sql.id(rows[0]!.name)}(${nulls})`.execute(c);
      return explained.rows.map((r) => r['QUERY PLAN']).join('\n');
    } finally {
      await sql`RESET ALL`.execute(c); // the pooled connection goes back as it came
    }
  });
  expect(plan).toContain('work_claims_live_qa_admission');
});

test('W7 W8 a release nobody waits for frees the host, healthy or not, and one with a waiter frees an unhealthy host without reserving it', async () => {
  const failedVerification = () =>
    sql`INSERT INTO test_machine_checks (test_machine, kind, passed, reason, started_at, finished_at)
        VALUES ('lab-1', 'verification', false, 'exit_status_1', now() - interval '2 seconds', now() - interval '1 second')`.execute(
      t.db,
    );
  // nobody waits: the host is free after the release, even when it was found unhealthy meanwhile
  const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  await failedVerification();
  const alone = await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
  expect(alone.reservations).toEqual([]);
  expect(await liveOn('lab-1')).toEqual([]);
  // W8: someone waits, the host is unhealthy: released, reserved for no one, the waiter still waits
  await sql`DELETE FROM test_machine_checks`.execute(t.db);
  const again = await s.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w2', key: LAB, join: { resumeCommand: 'resume' } }));
  await failedVerification();
  const served = await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: again.claim.claim_id, reason: 'done' });
  expect(served.reservations).toEqual([]);
  expect(await liveOn('lab-1')).toEqual([]);
  expect((await s.listWaits({ testMachine: 'lab-1' })).map((w) => [w.session_id, w.state])).toEqual([
    ['w2', 'waiting'],
  ]);
});

test('C9 W7 issue 16: the one-statement release answers each claim as every reader shows it: its project, item and holder actor, and the reserved turn of the oldest waiter', async () => {
  const read = async (claimId: number) => (await claimViews(t.db, { claimIds: [claimId] }))[0];
  // an item-bound claim, released by another live session of its holder's actor (C9)
  await s.registerSession({ sessionId: 'w1b', actorId: 'alice', project: 'api' });
  const migration = await s.acquireCoordinationClaim({
    sessionId: 'w1',
    key: 'LIVE_DB_MIGRATION:orders',
    project: 'web',
    item: 'WEB-1',
  });
  const released = await releaseCounted('w1b', migration.claim.claim_id);
  expect(released.statements).toBe(1);
  expect(released.claim).toMatchObject({
    project: 'web',
    item: 'WEB-1',
    actor_id: 'alice',
    released_by_session_id: 'w1b',
  });
  expect(released.claim).toEqual(await read(migration.claim.claim_id));
  // a test machine with a waiter of another project: the turn's view names the waiter's actor and project
  const lab = await s.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  await refusalOf(s.acquireCoordinationClaim({ sessionId: 'a1', key: LAB, join: { resumeCommand: 'resume' } }));
  const served = await releaseCounted('w1', lab.claim.claim_id);
  expect(served.statements).toBe(1);
  expect(served.claim).toEqual(await read(lab.claim.claim_id));
  const [turn] = served.reservations;
  expect(turn).toMatchObject({ session_id: 'a1', test_machine: 'lab-1' });
  expect(await read(turn!.claim_id)).toMatchObject({
    project: 'api',
    actor_id: 'carol',
    reserved_until: turn!.reserved_until,
  });
  // a release another actor's session asks for is not the one statement's: the full path's operator rules refuse it
  const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2' });
  const refused = await refusalOf(
    s.releaseWorkClaim({ actingSessionId: 'a1', claimId: held.claim.claim_id, reason: 'x' }),
  );
  expect(refused.code).toBe('steering_seat_required');
  expect(await liveOn('lab-2')).toEqual([expect.objectContaining({ claim_id: held.claim.claim_id, session_id: 'w1' })]);
});

/** 0060's two, whose rules 0061 folds into the UPDATE triggers below. */
const LATER = ['work_claims_times_now', 'work_claims_user_update_operator'];

test("issue 16 S1 C8: the user-only rules of work_claims run from one INSERT and two UPDATE triggers (0060's two folded in by 0061); the delivered-release test stays in the UPDATE WHENs, behind the kinds it can hold (0055 and 0061, down and up)", async () => {
  const whens = async () =>
    (
      await sql<{ name: string; def: string }>`
        SELECT tgname AS name, pg_get_triggerdef(oid) AS def FROM pg_trigger
         WHERE tgrelid = 'work_claims'::regclass AND NOT tgisinternal ORDER BY tgname`.execute(t.db)
    ).rows;
  const now = await whens();
  const def = Object.fromEntries(now.map((w) => [w.name, w.def]));
  expect(Object.keys(def)).toEqual([
    'work_claims_delivered_release',
    'work_claims_user_insert',
    'work_claims_user_update',
  ]);
  expect(def.work_claims_user_insert).toMatch(/ WHEN \(yoke_acts_as_user\(\)\) EXECUTE/);
  const delivered =
    /target_kind = ANY \(ARRAY\['item'::text, 'migration_serialization'::text, 'epic_task'::text, 'path_claim'::text\]\)\) AND yoke_delivered_release\(old\.\*, new\.\*\)/;
  expect(def.work_claims_delivered_release).toMatch(
    / WHEN \(\(yoke_acts_as_user\(\) AND \(\(old\.released_at IS NULL\)/,
  );
  expect(def.work_claims_delivered_release).toMatch(delivered);
  expect(def.work_claims_user_update).toMatch(
    / WHEN \(\(yoke_acts_as_user\(\) AND \(NOT \(\(old\.released_at IS NULL\)/,
  );
  expect(def.work_claims_user_update).toMatch(delivered);
  await claimUserTriggersFolded.down(t.db);
  expect((await whens()).map((w) => w.name)).toEqual([...Object.keys(def), ...LATER].sort());
  const withoutLater = (names: string[]) => names.filter((name) => !LATER.includes(name));
  await claimUserTriggers.down(t.db);
  expect(withoutLater((await whens()).map((w) => w.name))).toHaveLength(6);
  await claimUserTriggers.up(t.db);
  await claimUserTriggersFolded.up(t.db);
  expect(await whens()).toEqual(now);
});

test('C3 C9 W7 issue 16: the one-statement acquire and release each answer one json column, read back as the view every reader shows (refusal and reserved turn included)', async () => {
  const columns: string[][] = [];
  const claims = claimActivities({
    db: t.db.withPlugin({
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        columns.push(Object.keys(args.result.rows[0] ?? {}));
        return args.result;
      },
    }),
  });
  const read = async (claimId: number) => (await claimViews(t.db, { claimIds: [claimId] }))[0];
  const held = await claims.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  expect(held.claim).toEqual(await read(held.claim.claim_id));
  const refused = await refusalOf(claims.acquireCoordinationClaim({ sessionId: 'a1', key: LAB }));
  expect(refused.details.holder).toMatchObject({ claim_id: held.claim.claim_id, actor_id: 'alice' });
  await refusalOf(claims.acquireCoordinationClaim({ sessionId: 'a1', key: LAB, join: { resumeCommand: 'resume' } }));
  columns.length = 0;
  const released = await claims.releaseWorkClaim({
    actingSessionId: 'w1',
    claimId: held.claim.claim_id,
    reason: 'done',
  });
  expect(columns).toEqual([['r']]);
  expect(released.claim).toEqual(await read(held.claim.claim_id));
  const [turn] = released.reservations;
  expect(await read(turn!.claim_id)).toMatchObject({ session_id: 'a1', reserved_until: turn!.reserved_until });
  columns.length = 0;
  await claims.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2' });
  expect(columns).toEqual([['r']]);
});

test('W7 issue 16: the release finds its machine and takes the line lock in one statement, before the statement that releases; down and up', async () => {
  const source = async () =>
    (await sql<{ def: string }>`SELECT pg_get_functiondef('yoke_release_claim'::regproc) AS def`.execute(t.db)).rows[0]!
      .def;
  const folded = /LATERAL pg_catalog\.pg_advisory_xact_lock[\s\S]*UPDATE public\.work_claims/;
  expect(await source()).toMatch(folded);
  expect(await source()).not.toContain('PERFORM pg_advisory_xact_lock');
  await leanPair.down(t.db);
  expect(await source()).toContain('PERFORM pg_advisory_xact_lock');
  await leanPair.up(t.db);
  expect(await source()).toMatch(folded);
  // the folded release still serves the line: a waiter gets the turn in the release's statement
  const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: LAB });
  await refusalOf(s.acquireCoordinationClaim({ sessionId: 'a1', key: LAB, join: { resumeCommand: 'resume' } }));
  const released = await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
  expect(released.reservations).toEqual([expect.objectContaining({ session_id: 'a1', test_machine: 'lab-1' })]);
});
