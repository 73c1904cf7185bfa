import type { Kysely } from 'kysely';
import { Client } from 'pg';
import { claimPrimitiveActivities } from '../../activities/claimPrimitives';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import type { Database } from '../../db/database';
import { createDb } from '../../db/pool';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines, refusalOf as yokeRefusalOf, services } from '../helpers/fixtures';
import { refusalOf, sqlActors, type SqlActor } from '../helpers/roles';
import { applyWebRelease, walkedRun } from '../helpers/runs';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { recordLease } from '../../db/qaExecutions';

/**
 * Issues 12 and 13: `yoke deployment-runs update RUN status succeeded` run by the run's driver
 * as a plain user writes the settlement commit and its effects (S1, S3, S5) under the user's
 * own role. Each write follows the run's R1 rule and stays on the run's own rows (migration
 * 0029_settlement_user_role); another actor without authority is refused and writes nothing.
 */
let t: TestDatabase;
let su: Client;
let admin: DeploymentRunActivities;
const actors = sqlActors(() => t.url);
let driver: SqlActor; // holds runs.deploy on web and drives the runs below
let holder: SqlActor; // holds the claims the settlement releases
let agent: SqlActor; // no grant, no seat
let web: number;
const pools: Kysely<Database>[] = [];
const SHA = 'a1b2c3d4e5f6';

const tracker = async () => ({ markDelivered: async () => 'closed' });

function runsAs(actor: SqlActor): DeploymentRunActivities {
  const db = createDb(actor.url, { max: 2 });
  pools.push(db);
  return deploymentRunActivities({ db, driverFreshMs: 60_000, tracker });
}

beforeAll(async () => {
  t = await createTestDatabase();
  su = new Client({ connectionString: t.url });
  await su.connect();
  await applyWebRelease(t.db);
  admin = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000, tracker });
  [driver, holder, agent] = [await actors.add('driver'), await actors.add('holder'), await actors.add('agent')];
  web = (await su.query("SELECT project_id FROM projects WHERE name = 'web'")).rows[0].project_id;
  await su.query("INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, $2, 'runs.deploy')", [
    web,
    driver.name,
  ]);
  await su.query(
    'INSERT INTO sessions (session_id, actor_id, project_id) SELECT s, a, $3 FROM unnest($1::text[], $2::text[]) AS x(s, a)',
    [['dr1', 'h1', 'h2', 'h3', 'ag1'], [driver, holder, holder, holder, agent].map((a) => a.name), web],
  );
});
afterAll(async () => {
  for (const db of pools) await db.destroy();
  await actors.end();
  await su.end();
  await t.drop();
});

/** A release run of its members, driven by dr1, walked through its stages with its QA passed (as the superuser). */
async function readyRun(members: string | string[], key: string, holderSession: string): Promise<string> {
  for (const item of [members].flat()) await services(t.db).takeItem({ sessionId: holderSession, item });
  const runId = await walkedRun(admin, {
    items: [members].flat(),
    idempotencyKey: key,
    candidate: SHA,
    sessionId: 'dr1',
    project: 'web',
    flow: 'release',
    target: 'stage',
  });
  await admin.recordQaVerdict({ sessionId: 'dr1', runId, checkName: 'smoke-test', status: 'passed' });
  return runId;
}

/** What a settlement wrote for the run, with the run's own name taken out. */
async function settled(runId: string, holderSession: string) {
  const q = async (text: string) => (await su.query(text, [runId])).rows;
  return {
    run: await q(
      'SELECT status, settling_at IS NOT NULL AS settling, settlement_committed_at IS NOT NULL AS committed FROM deployment_runs WHERE run_id = $1',
    ),
    items: await q(
      `SELECT i.status, jsonb_array_length(i.delivery_evidence->'completed_deliveries') AS deliveries, m.closed_at IS NOT NULL AS closed
         FROM deployment_run_items m JOIN backlog_items i ON i.item_id = m.item_id WHERE m.run_id = $1`,
    ),
    effects: (
      await q(
        'SELECT effect, applied_at IS NOT NULL AS applied, outcome, last_error FROM deployment_run_member_effects WHERE run_id = $1 ORDER BY effect',
      )
    ).map((e) => ({ ...e, outcome: String(e.outcome).replace(holderSession, 'HOLDER') })),
    events: await q(
      "SELECT event_type FROM events WHERE payload->>'run_id' = $1 AND event_type IN ('DeploymentRunSettling', 'DeploymentRunSucceeded', 'ItemDone') ORDER BY event_type",
    ),
    holder: (
      await su.query(
        'SELECT ended_at IS NOT NULL AS ended, (SELECT count(*)::int FROM work_claims c WHERE c.session_id = s.session_id AND c.released_at IS NULL) AS live FROM sessions s WHERE session_id = $1',
        [holderSession],
      )
    ).rows[0],
  };
}

test('S1 S3 S5 issue 13: the run driver as a plain user settles the run with update RUN status succeeded, exactly as the admin path does', async () => {
  // The admin path first, as the reference.
  const byAdmin = await readyRun('WEB-3', 'admin', 'h1');
  const adminOut = await admin.updateRunStatus({
    sessionId: 'dr1',
    runId: byAdmin,
    field: 'status',
    value: 'succeeded',
  });
  expect(adminOut).toMatchObject({ status: 'succeeded', replayed: false, effects_pending: 0 });
  const adminWrote = await settled(byAdmin, 'h1');

  // Then the same under the driver's own login role.
  const byDriver = await readyRun('WEB-2', 'driver', 'h2');
  await admin.recordQaVerdict({ sessionId: 'dr1', runId: byDriver, checkName: 'WEB-2/gift-smoke', status: 'passed' });
  const out = await runsAs(driver).updateRunStatus({
    sessionId: 'dr1',
    runId: byDriver,
    field: 'status',
    value: 'succeeded',
  });
  expect(out).toMatchObject({ status: 'succeeded', replayed: false, effects_pending: 0 });
  expect((out as { effects: { failed: unknown[] } }).effects.failed).toEqual([]);
  const driverWrote = await settled(byDriver, 'h2');
  expect(driverWrote).toEqual(adminWrote);
  expect(driverWrote.run).toEqual([{ status: 'succeeded', settling: true, committed: true }]);
  expect(driverWrote.effects.map((e) => e.applied)).toEqual([true, true, true]);
  expect(driverWrote.holder).toEqual({ ended: true, live: 0 });
  // A replay answers the same again.
  await expect(
    runsAs(driver).updateRunStatus({ sessionId: 'dr1', runId: byDriver, field: 'status', value: 'succeeded' }),
  ).resolves.toMatchObject({ status: 'succeeded', replayed: true });
});

test('S1 S3 issue 13: another actor without authority is refused, through the activity and by raw SQL, and nothing is written', async () => {
  const runId = await readyRun('WEB-1', 'refused', 'h3');
  const before = await settled(runId, 'h3');
  const viaCli = await yokeRefusalOf(
    runsAs(agent).updateRunStatus({ sessionId: 'ag1', runId, field: 'status', value: 'succeeded' }),
  );
  expect(viaCli.code).toBe('run_driven_elsewhere');
  const item = (await su.query('SELECT item_id FROM deployment_run_items WHERE run_id = $1', [runId])).rows[0].item_id;
  // The effects ledger: never for a run the actor has no authority on, nor before the run's commit.
  expect(
    await refusalOf(
      agent.q(
        "INSERT INTO deployment_run_member_effects (run_id, item_id, effect, attempts) VALUES ($1, $2, 'tracker_sync', 1)",
        [runId, item],
      ),
    ),
  ).toBe('permission_denied');
  expect(
    await refusalOf(
      driver.q(
        "INSERT INTO deployment_run_member_effects (run_id, item_id, effect, attempts) VALUES ($1, $2, 'tracker_sync', 1)",
        [runId, item],
      ),
    ),
  ).toBe('permission_denied');
  // Another actor's session is ended by no one but its actor, however its claims stand.
  expect(await refusalOf(agent.q('UPDATE sessions SET ended_at = now() WHERE session_id = $1', ['h3']))).toBe(
    'permission_denied',
  );
  // Even the run's driver releases no claim and ends no session in the run's name before it delivered.
  expect(
    await refusalOf(
      driver.q(
        "UPDATE work_claims SET released_at = now(), release_reason = 'delivered by run ' || $1 WHERE session_id = 'h3'",
        [runId],
      ),
    ),
  ).not.toBe('allowed');
  expect(
    await refusalOf(
      driver.q(
        "UPDATE sessions SET ended_at = now(), end_reason = 'settled: no claims left after run ' || $1 WHERE session_id = 'h3'",
        [runId],
      ),
    ),
  ).toBe('permission_denied');
  expect(await settled(runId, 'h3')).toEqual(before);
});

test('D7 issue 12: under the driver’s own role, a dependency closing in the same settlement commit satisfies the done gate in Postgres', async () => {
  // the run the test before left waiting on the stage origin is cancelled, so this one may occupy it
  for (const { run_id } of (await su.query("SELECT run_id FROM deployment_runs WHERE status = 'executing'")).rows)
    await admin.terminalizeRun({ sessionId: 'dr1', runId: run_id, disposition: 'cancelled', reason: 'next test' });
  // the rows exist before the dependency between them (a claim names a bare item)
  await services(t.db).takeItem({ sessionId: 'h3', item: 'WEB-10' });
  await services(t.db).takeItem({ sessionId: 'h3', item: 'WEB-11' });
  await su.query(
    `INSERT INTO item_dependencies (item_id, depends_on_item_id, environment)
     SELECT a.item_id, b.item_id, '' FROM backlog_items a, backlog_items b
      WHERE a.project_id = $1 AND a.number = 11 AND b.project_id = $1 AND b.number = 10`,
    [web],
  );
  const runId = await readyRun(['WEB-10', 'WEB-11'], 'together', 'h3');
  const out = await runsAs(driver).updateRunStatus({ sessionId: 'dr1', runId, field: 'status', value: 'succeeded' });
  expect(out).toMatchObject({ status: 'succeeded' });
  const { rows } = await su.query(
    'SELECT number, status FROM backlog_items WHERE project_id = $1 AND number IN (10, 11) ORDER BY number',
    [web],
  );
  expect(rows).toEqual([
    { number: 10, status: 'done' },
    { number: 11, status: 'done' },
  ]);
});

test('S2 S3 issue 12 audit: under the driver’s own role, a delivered member’s epic-task and path claims end with it, with no operator event, and the holder session left with none ends', async () => {
  for (const { run_id } of (await su.query("SELECT run_id FROM deployment_runs WHERE status = 'executing'")).rows)
    await admin.terminalizeRun({ sessionId: 'dr1', runId: run_id, disposition: 'cancelled', reason: 'next test' });
  await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3)', [
    'h4',
    holder.name,
    web,
  ]);
  const primitives = claimPrimitiveActivities({ db: t.db });
  await primitives.takeEpicTask({ sessionId: 'h4', item: 'WEB-12', task: 'T001' });
  await primitives.takePaths({ sessionId: 'h4', paths: ['src/web-12.ts', 'src/web-12.css'], item: 'WEB-12' });
  const runId = await readyRun('WEB-12', 'primitives', 'h4');
  const out = await runsAs(driver).updateRunStatus({ sessionId: 'dr1', runId, field: 'status', value: 'succeeded' });
  expect(out).toMatchObject({ status: 'succeeded', effects_pending: 0 });
  const { rows: claims } = await su.query(
    'SELECT target_kind, released_at IS NOT NULL AS released, release_reason FROM work_claims WHERE session_id = $1 ORDER BY claim_id',
    ['h4'],
  );
  expect(claims).toEqual([
    { target_kind: 'epic_task', released: true, release_reason: `delivered by run ${runId}` },
    { target_kind: 'path_claim', released: true, release_reason: `delivered by run ${runId}` },
    { target_kind: 'path_claim', released: true, release_reason: `delivered by run ${runId}` },
    { target_kind: 'item', released: true, release_reason: `delivered by run ${runId}` },
  ]);
  const { rows: events } = await su.query(
    "SELECT count(*)::int AS n FROM events WHERE event_type = 'WARNOperatorLeaseRelease' AND payload->>'holder_session_id' = 'h4'",
  );
  expect(events).toEqual([{ n: 0 }]);
  const { rows: session } = await su.query('SELECT ended_at IS NOT NULL AS ended FROM sessions WHERE session_id = $1', [
    'h4',
  ]);
  expect(session).toEqual([{ ended: true }]);
});

test('O4 W9 issue 13: success aborts a run-scoped execution still running; under the driver’s own role one holding another actor’s test machine is refused whole, and the worker’s settlement ends it', async () => {
  for (const { run_id } of (await su.query("SELECT run_id FROM deployment_runs WHERE status = 'executing'")).rows)
    await admin.terminalizeRun({ sessionId: 'dr1', runId: run_id, disposition: 'cancelled', reason: 'next test' });
  await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3), ($4, $2, $3)', [
    'h5',
    holder.name,
    web,
    'qa1',
  ]);
  await addTestMachines(services(t.db), ['lab-9']);
  const runId = await readyRun('WEB-13', 'qa-lease', 'h5');
  // qa1 (the holder's actor, not the driver's) runs a run-scoped plan and holds lab-9 for it.
  const execution = await qaExecutionActivities({ db: t.db, driverFreshMs: 60_000 }).beginExecution({
    sessionId: 'qa1',
    runId,
    stage: 'stage-qa',
    plan: 'PLAN-7',
  });
  const lease = await services(t.db).acquireCoordinationClaim({ sessionId: 'qa1', key: 'QA_HOST:lab-9' });
  await recordLease(t.db, execution.execution_id, {
    claim_id: lease.claim.claim_id,
    test_machine: 'lab-9',
    claimed_at: new Date(lease.claim.claimed_at),
  });
  const state = async () => ({
    run: (await su.query('SELECT status FROM deployment_runs WHERE run_id = $1', [runId])).rows[0].status,
    execution: (
      await su.query('SELECT status, release_reason FROM qa_plan_executions WHERE execution_id = $1', [
        execution.execution_id,
      ])
    ).rows[0],
    lease: (
      await su.query('SELECT released_by_session_id FROM work_claims WHERE claim_id = $1 AND released_at IS NOT NULL', [
        lease.claim.claim_id,
      ])
    ).rows[0],
  });
  // The driver may not release qa1's hold (only its actor or a steering seat may): the success is
  // refused whole, as terminalize is, and nothing is written.
  await expect(
    runsAs(driver).updateRunStatus({ sessionId: 'dr1', runId, field: 'status', value: 'succeeded' }),
  ).rejects.toThrow(/cannot release claim/);
  expect(await state()).toEqual({
    run: 'executing',
    execution: { status: 'running', release_reason: null },
    lease: undefined,
  });
  // The worker's settlement (the service) ends it with the run's success.
  await expect(admin.finishSettlement({ runId })).resolves.toMatchObject({ status: 'succeeded' });
  expect(await state()).toEqual({
    run: 'succeeded',
    execution: { status: 'aborted', release_reason: 'run_succeeded' },
    lease: { released_by_session_id: 'qa1' },
  });
});

test('S1 C5 issue 16: one UPDATE by a seat holder that releases its own seat and a delivered member’s claim admits the delivered release (its test reads the statement’s snapshot, where the seat is still held)', async () => {
  for (const { run_id } of (await su.query("SELECT run_id FROM deployment_runs WHERE status = 'executing'")).rows)
    await admin.terminalizeRun({ sessionId: 'dr1', runId: run_id, disposition: 'cancelled', reason: 'next test' });
  const operator = await actors.add('seat-holder');
  await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3), ($4, $5, $3)', [
    'op6',
    operator.name,
    web,
    'h6',
    holder.name,
  ]);
  // the seat is taken before the item claim, so the UPDATE below meets the seat's row first
  const seat = await services(t.db).takeSteeringSeat({ sessionId: 'op6', project: 'web' });
  const runId = await readyRun('WEB-14', 'seat-and-delivered', 'h6');
  // the member delivered: done, with this run among its completed deliveries (as the settlement commit writes it)
  await su.query(
    `UPDATE backlog_items SET status = 'done',
            delivery_evidence = jsonb_build_object('completed_deliveries', jsonb_build_array(jsonb_build_object('run', $1::text)))
      WHERE item_id = (SELECT item_id FROM deployment_run_items WHERE run_id = $1)`,
    [runId],
  );
  const item = (await su.query("SELECT claim_id FROM work_claims WHERE session_id = 'h6' AND released_at IS NULL"))
    .rows;
  expect(item).toHaveLength(1);
  const seatId = seat.claim.claim_id;
  expect(
    await refusalOf(
      operator.q(
        `UPDATE work_claims SET released_at = now(),
                release_reason = CASE WHEN claim_id = $2 THEN 'seat handed back' ELSE 'delivered by run ' || $1 END
          WHERE claim_id = ANY($3::bigint[])`,
        [runId, seatId, [seatId, item[0].claim_id]],
      ),
    ),
  ).toBe('allowed');
  const { rows } = await su.query(
    'SELECT session_id, released_by_actor_id FROM work_claims WHERE claim_id = ANY($1::bigint[]) ORDER BY claim_id',
    [[seatId, item[0].claim_id]],
  );
  expect(rows).toEqual([
    { session_id: 'op6', released_by_actor_id: operator.name },
    { session_id: 'h6', released_by_actor_id: operator.name },
  ]);
});
