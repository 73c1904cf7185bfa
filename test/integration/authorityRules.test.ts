import type { Kysely } from 'kysely';
import { Client } from 'pg';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { driverFreshMs } from '../../activities/deploymentSettings';
import type { Database } from '../../db/database';
import { createDb } from '../../db/pool';
import { refusalFromPostgres } from '../../domain/sqlRefusal';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines, refusalOf as yokeRefusalOf, services } from '../helpers/fixtures';
import { refusalOf, sqlActors, type SqlActor } from '../helpers/roles';
import { applyWebRelease, walkedRun } from '../helpers/runs';

/**
 * Issue 13, holes a second audit found by raw SQL as plain login roles (the rule in each
 * 0032_* migration): a run's QA verdict set by anyone, another actor's place in a waiting line
 * cancelled, a driver freshness Postgres hard-coded apart from the CLI's (issue 4), and events
 * forged for another's project in another's session. The CLI's own paths, run under the
 * actors' own roles, still pass.
 */
let t: TestDatabase;
let su: Client;
const actors = sqlActors(() => t.url);
let driver: SqlActor; // drives the run
let stranger: SqlActor; // no grant, no seat, no session on the run
let deployer: SqlActor; // runs.deploy on web, no seat
let holder: SqlActor; // holds a test machine
let waiter: SqlActor; // waits for it
let leaver: SqlActor; // waits, then leaves
let web: number;
let runId: string;
const pools: Kysely<Database>[] = [];
const LAB = 'QA_HOST:lab-w';

function dbOf(actor: SqlActor): Kysely<Database> {
  const db = createDb(actor.url, { max: 2 });
  pools.push(db);
  return db;
}

beforeAll(async () => {
  t = await createTestDatabase();
  su = new Client({ connectionString: t.url });
  await su.connect();
  await applyWebRelease(t.db);
  [driver, stranger, deployer, holder, waiter, leaver] = [
    await actors.add('driver'),
    await actors.add('stranger'),
    await actors.add('deployer'),
    await actors.add('holder'),
    await actors.add('waiter'),
    await actors.add('leaver'),
  ];
  web = (await su.query("SELECT project_id FROM projects WHERE name = 'web'")).rows[0].project_id;
  for (const [sid, who] of [
    ['dr1', driver],
    ['st1', stranger],
    ['dp1', deployer],
    ['h1', holder],
    ['x1', waiter],
    ['y1', leaver],
  ] as const)
    await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3)', [sid, who.name, web]);
  await su.query("INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, $2, 'runs.deploy')", [
    web,
    deployer.name,
  ]);
  runId = await walkedRun(deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 }), {
    sessionId: 'dr1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'a1b2c3d4e5f6',
    idempotencyKey: 'rules',
    items: [],
  });
});
afterAll(async () => {
  for (const db of pools) await db.destroy();
  await actors.end();
  await su.end();
  await t.drop();
});

const checkStatus = async (check: string) =>
  (await su.query('SELECT status FROM deployment_run_qa WHERE run_id = $1 AND check_name = $2', [runId, check])).rows[0]
    .status as string;

test("issue 13 R1: a plain user cannot set a run's QA check passed or failed by raw SQL; the driver's qa-verdict records it", async () => {
  const verdict = (who: SqlActor, status: string) =>
    who.q("UPDATE deployment_run_qa SET status = $2 WHERE run_id = $1 AND check_name = 'smoke-test'", [runId, status]);
  expect(await refusalOf(verdict(stranger, 'passed'))).toBe('run_driven_elsewhere');
  expect(await refusalOf(verdict(stranger, 'failed'))).toBe('run_driven_elsewhere');
  // Nor by a new row born passed, nor past the policy with a row the trigger lets through.
  expect(
    await refusalOf(
      stranger.q(
        "INSERT INTO deployment_run_qa (run_id, check_name, source, status) VALUES ($1, 'forged', 'flow-default', 'passed')",
        [runId],
      ),
    ),
  ).toBe('run_driven_elsewhere');
  expect(await checkStatus('smoke-test')).toBe('pending');

  // With no live driver, one who may deploy still needs the seat (the CLI's strict rule).
  await su.query("UPDATE deployment_runs SET driver_heartbeat_at = now() - interval '1 hour' WHERE run_id = $1", [
    runId,
  ]);
  expect(await refusalOf(verdict(deployer, 'passed'))).toBe('steering_seat_required');
  await su.query('UPDATE deployment_runs SET driver_heartbeat_at = now() WHERE run_id = $1', [runId]);

  // The CLI's qa-verdict under the driver's own role.
  const asDriver = deploymentRunActivities({ db: dbOf(driver), driverFreshMs: 60_000 });
  await expect(
    asDriver.recordQaVerdict({ sessionId: 'dr1', runId, checkName: 'smoke-test', status: 'failed' }),
  ).resolves.toMatchObject({ status: 'failed' });
  await expect(
    asDriver.recordQaVerdict({ sessionId: 'dr1', runId, checkName: 'smoke-test', status: 'passed' }),
  ).resolves.toMatchObject({ status: 'passed' });
  expect(await checkStatus('smoke-test')).toBe('passed');
});

test("issue 13 W7 W9: a user cannot cancel another actor's place in a waiting line; the line's own hand-offs and a waiter's own moves pass", async () => {
  await addTestMachines(services(t.db), ['lab-w']);
  const line = (who: SqlActor) => services(dbOf(who), { reservationLifetimeMs: 60_000 });
  const join = (who: SqlActor, sid: string) =>
    yokeRefusalOf(
      line(who).acquireCoordinationClaim({ sessionId: sid, key: LAB, join: { resumeCommand: `acquire ${sid}` } }),
    );
  const held = await line(holder).acquireCoordinationClaim({ sessionId: 'h1', key: LAB });
  expect((await join(waiter, 'x1')).code).toBe('claim_held');
  expect((await join(leaver, 'y1')).code).toBe('claim_held');
  const states = async () =>
    (
      await su.query(
        "SELECT session_id, state, cancel_reason FROM qa_test_machine_waits WHERE test_machine = 'lab-w' ORDER BY wait_id",
      )
    ).rows;

  // The audit's statement, and a forged reservation.
  expect(
    await refusalOf(
      stranger.q(
        "UPDATE qa_test_machine_waits SET state = 'cancelled', settled_at = now(), cancel_reason = 'kicked' WHERE state = 'waiting'",
      ),
    ),
  ).toBe('permission_denied');
  expect(
    await refusalOf(
      stranger.q("UPDATE qa_test_machine_waits SET state = 'reserved', claim_id = $1 WHERE session_id = 'x1'", [
        held.claim.claim_id,
      ]),
    ),
  ).toBe('permission_denied');
  expect(await states()).toEqual([
    { session_id: 'x1', state: 'waiting', cancel_reason: null },
    { session_id: 'y1', state: 'waiting', cancel_reason: null },
  ]);

  // A waiter leaves the line itself.
  expect(
    await refusalOf(
      leaver.q(
        "UPDATE qa_test_machine_waits SET state = 'cancelled', settled_at = now(), cancel_reason = 'left' WHERE session_id = 'y1' AND state = 'waiting'",
      ),
    ),
  ).toBe('allowed');
  // W7: the holder's release reserves the machine for the oldest waiter (another actor's wait), who takes its turn.
  const released = await line(holder).releaseWorkClaim({
    actingSessionId: 'h1',
    claimId: held.claim.claim_id,
    reason: 'done',
  });
  expect(released.reservations.map((r) => r.session_id)).toEqual(['x1']);
  await expect(line(waiter).acquireCoordinationClaim({ sessionId: 'x1', key: LAB })).resolves.toMatchObject({
    consumed_reservation: true,
  });
  // W9: a wait whose session has ended is anyone's to cancel.
  expect((await join(leaver, 'y1')).code).toBe('claim_held');
  await su.query("UPDATE sessions SET ended_at = now(), end_reason = 'gone' WHERE session_id = 'y1'");
  expect(
    await refusalOf(
      stranger.q(
        "UPDATE qa_test_machine_waits SET state = 'cancelled', settled_at = now(), cancel_reason = 'session_ended' WHERE session_id = 'y1' AND state = 'waiting'",
      ),
    ),
  ).toBe('allowed');
  expect(await states()).toEqual([
    { session_id: 'x1', state: 'granted', cancel_reason: null },
    { session_id: 'y1', state: 'cancelled', cancel_reason: 'left' },
    { session_id: 'y1', state: 'cancelled', cancel_reason: 'session_ended' },
  ]);
});

test('issue 4 issue 13 R1: driver freshness is one deployment setting Postgres and the CLI honour; users cannot change it; the refusal names the driver', async () => {
  expect(await refusalOf(stranger.q('UPDATE deployment_settings SET driver_fresh_seconds = 1'))).toBe(
    'permission_denied',
  );
  expect(await driverFreshMs(dbOf(stranger), 1)).toBe(600_000);
  await su.query('UPDATE deployment_settings SET driver_fresh_seconds = 5');
  const asDeployer = deploymentRunActivities({
    db: dbOf(deployer),
    driverFreshMs: await driverFreshMs(dbOf(deployer), 600_000),
  });

  // Fresh: Postgres refuses a raw heartbeat, naming the driver's session and actor.
  await su.query("UPDATE deployment_runs SET driver_heartbeat_at = now() - interval '2 seconds' WHERE run_id = $1", [
    runId,
  ]);
  const err = await deployer
    .q('UPDATE deployment_runs SET driver_heartbeat_at = now() WHERE run_id = $1', [runId])
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(refusalFromPostgres(err)).toMatchObject({
    code: 'run_driven_elsewhere',
    details: { run_id: runId, driver_session_id: 'dr1', driver_actor_id: driver.name, actor_id: deployer.name },
  });
  expect((await yokeRefusalOf(asDeployer.heartbeatRun({ sessionId: 'dp1', runId }))).code).toBe('run_driven_elsewhere');

  // Lapsed by the deployment's setting (7 s > 5 s, far inside ten minutes): the run is free for the CLI and Postgres alike.
  await su.query("UPDATE deployment_runs SET driver_heartbeat_at = now() - interval '7 seconds' WHERE run_id = $1", [
    runId,
  ]);
  await expect(asDeployer.heartbeatRun({ sessionId: 'dp1', runId })).resolves.toBeDefined();
  expect(
    (await su.query('SELECT driver_session_id FROM deployment_runs WHERE run_id = $1', [runId])).rows[0]
      .driver_session_id,
  ).toBe('dp1');
  await su.query('UPDATE deployment_settings SET driver_fresh_seconds = 600');
});

test("issue 13: a user's events name its own session and a run it may act on; forged ItemDone and DeploymentRunSucceeded are refused", async () => {
  const event = (who: SqlActor, type: string, sid: string | null, payload: object) =>
    who.q('INSERT INTO events (event_type, project_id, session_id, payload) VALUES ($1, $2, $3, $4)', [
      type,
      web,
      sid,
      JSON.stringify(payload),
    ]);
  // dp1 drives the run now (the test above).
  expect(await refusalOf(event(stranger, 'ItemDone', 'dp1', { item: 'WEB-1', run_id: runId }))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(event(stranger, 'ItemDone', 'st1', { item: 'WEB-1', run_id: runId }))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(event(stranger, 'DeploymentRunSucceeded', null, { run_id: runId }))).toBe('permission_denied');
  expect(await refusalOf(event(stranger, 'DeploymentRunStageStarted', null, {}))).toBe('permission_denied');
  expect(await refusalOf(event(stranger, 'QaPlanExecutionBegun', 'st1', { execution_id: 1, run_id: runId }))).toBe(
    'permission_denied',
  );
  // The driver, in its own session (or none), on its run: as its commands write them; not in another's session.
  expect(await refusalOf(event(deployer, 'DeploymentRunCancelled', 'dp1', { run_id: runId, reason: 'x' }))).toBe(
    'allowed',
  );
  expect(await refusalOf(event(deployer, 'DeploymentRunSettling', null, { run_id: runId }))).toBe('allowed');
  expect(await refusalOf(event(deployer, 'DeploymentRunSettling', 'dr1', { run_id: runId }))).toBe('permission_denied');
});
