import type { Kysely } from 'kysely';
import { Client } from 'pg';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { itemActivities } from '../../activities/items';
import type { Database } from '../../db/database';
import { createDb } from '../../db/pool';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf as yokeRefusalOf, services } from '../helpers/fixtures';
import { refusalOf, sqlActors, type SqlActor } from '../helpers/roles';
import { applyWebRelease, walkedRun as walkRun } from '../helpers/runs';

/**
 * Issue 13, holes an audit found connecting as real login roles with raw SQL: items retitled
 * and set done past the done gate (D7), passed machine checks recorded by users (W2, W8),
 * and an operator release that wrote no WARNOperatorLeaseRelease event (C11). Each rule is
 * now Postgres's (migration 0027_authority_holes); the legitimate paths, run as a user's own
 * role, still pass.
 */
let t: TestDatabase;
let su: Client;
let r: DeploymentRunActivities;
const actors = sqlActors(() => t.url);
let agent: SqlActor; // a user with no grant and no seat
let ops: SqlActor; // a user with claims.release on web, who takes the seat
let holder: SqlActor; // a user holding claims
let worker: SqlActor;
let driver: SqlActor; // drives the runs below (R1: the done write closes its membership)
let web: number;
const pools: Kysely<Database>[] = [];
const SHA = 'a1b2c3d4e5f6';

/** The CLI's activities connected as an actor's own role. */
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
  r = deploymentRunActivities({
    db: t.db,
    driverFreshMs: 60_000,
    tracker: async () => ({ markDelivered: async () => 'closed' }),
  });
  [agent, ops, holder, worker, driver] = [
    await actors.add('agent', 'agent'),
    await actors.add('ops'),
    await actors.add('holder'),
    await actors.add('wrk', 'worker'),
    await actors.add('driver'),
  ];
  web = (await su.query("SELECT project_id FROM projects WHERE name = 'web'")).rows[0].project_id;
  for (const [sid, who] of [
    ['ag1', agent],
    ['op1', ops],
    ['h1', holder],
    ['dr1', driver],
  ] as const)
    await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3)', [sid, who.name, web]);
  await su.query("INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, $2, 'claims.release')", [
    web,
    ops.name,
  ]);
});
afterAll(async () => {
  for (const db of pools) await db.destroy();
  await actors.end();
  await su.end();
  await t.drop();
});

const itemId = async (number: number): Promise<number> =>
  (await su.query('SELECT item_id FROM backlog_items WHERE project_id = $1 AND number = $2', [web, number])).rows[0]
    .item_id;

/** A release run of the members driven by dr1, executed and walked through all its stages (as the superuser). */
async function walkedRun(members: string[], key: string): Promise<string> {
  return walkRun(r, {
    sessionId: 'dr1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: SHA,
    idempotencyKey: key,
    items: members,
  });
}

async function pass(runId: string, ...checks: string[]) {
  for (const checkName of checks) await r.recordQaVerdict({ sessionId: 'dr1', runId, checkName, status: 'passed' });
}

/** A raw done write the way the CLI's statements make it: the stamps, then done with the run's attribution. */
async function rawDone(who: SqlActor, item: number, ref: string, runId: string): Promise<string> {
  const stamps = await refusalOf(
    who.q(
      `UPDATE backlog_items SET delivery_evidence = delivery_evidence
         || jsonb_build_object('rung', jsonb_build_object('rung', 'released', 'run', $2::text))
         || jsonb_build_object('preflight', jsonb_build_object('run', $2::text))
        WHERE item_id = $1`,
      [item, runId],
    ),
  );
  if (stamps !== 'allowed') return stamps;
  return refusalOf(
    who.q(
      `UPDATE backlog_items SET status = 'done', delivery_evidence = jsonb_set(delivery_evidence, '{completed_deliveries}',
         coalesce(delivery_evidence -> 'completed_deliveries', '[]') || jsonb_build_array(jsonb_build_object(
           'owner', 'web', 'member', $3::text, 'run', $2::text, 'environment', 'stage', 'candidate', $4::text, 'recorded_at', now())))
        WHERE item_id = $1`,
      [item, runId, ref, SHA],
    ),
  );
}

test('D7 issue 13: a user with no grant and no seat cannot retitle an item, set it done, forge a delivery or insert a done item', async () => {
  const item = await itemId(3);
  const statusOf = async () =>
    (await su.query('SELECT status, title FROM backlog_items WHERE item_id = $1', [item])).rows[0];
  expect(await refusalOf(agent.q("UPDATE backlog_items SET title = 'owned' WHERE item_id = $1", [item]))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(agent.q("UPDATE backlog_items SET status = 'done' WHERE item_id = $1", [item]))).toBe(
    'done_gate_refused',
  );
  // A completed delivery naming no delivered run of the item is refused, done or not.
  expect(
    await refusalOf(
      agent.q(
        `UPDATE backlog_items SET delivery_evidence = jsonb_build_object('completed_deliveries', jsonb_build_array(
           jsonb_build_object('owner', 'web', 'member', 'WEB-3', 'run', 'run-0', 'environment', 'production', 'candidate', 'x')))
          WHERE item_id = $1`,
        [item],
      ),
    ),
  ).toBe('permission_denied');
  expect(await statusOf()).toEqual({ status: 'open', title: 'Docs' });
  // A user names items with bare rows only.
  expect(
    await refusalOf(agent.q("INSERT INTO backlog_items (project_id, number, status) VALUES ($1, 901, 'done')", [web])),
  ).toBe('permission_denied');
  expect(await refusalOf(agent.q('INSERT INTO backlog_items (project_id, number) VALUES ($1, 902)', [web]))).toBe(
    'allowed',
  );
  // Moving an item along stays anyone's, as `yoke items update` allows.
  expect(
    await refusalOf(
      agent.q("UPDATE backlog_items SET status = 'in_progress', lane_path = '/tmp/lane' WHERE item_id = $1", [item]),
    ),
  ).toBe('allowed');
});

/**
 * The agent's raw done write through a settling run (its stamps first, then done with the run's
 * attribution) is refused in Postgres by the done gate with `reason`, and the item stays open.
 */
async function expectRawDoneRefused(item: number, ref: string, runId: string, reason: string): Promise<void> {
  const c = new Client({ connectionString: agent.url });
  await c.connect();
  try {
    await c.query(
      `UPDATE backlog_items SET delivery_evidence = delivery_evidence
         || jsonb_build_object('rung', jsonb_build_object('run', $2::text), 'preflight', jsonb_build_object('run', $2::text))
        WHERE item_id = $1`,
      [item, runId],
    );
    await expect(
      c.query(
        `UPDATE backlog_items SET status = 'done', delivery_evidence = jsonb_set(delivery_evidence, '{completed_deliveries}',
           jsonb_build_array(jsonb_build_object('owner', 'web', 'member', $4::text, 'run', $2::text, 'environment', 'stage', 'candidate', $3::text)))
          WHERE item_id = $1`,
        [item, runId, SHA, ref],
      ),
    ).rejects.toMatchObject({ code: 'YK001', detail: 'done_gate_refused', message: expect.stringContaining(reason) });
  } finally {
    await c.end();
  }
  expect((await su.query('SELECT status FROM backlog_items WHERE item_id = $1', [item])).rows[0].status).not.toBe(
    'done',
  );
}

test("D7 issue 13: Postgres holds a user's done write to the done gate; the CLI's own done write passes it as the run's driver", async () => {
  const item = await itemId(2);
  const runId = await walkedRun(['WEB-2'], 'gate');
  await pass(runId, 'smoke-test', 'WEB-2/gift-smoke');
  // The run is not settling yet: not delivered, whatever the statements claim.
  expect(await rawDone(agent, item, 'WEB-2', runId)).toBe('done_gate_refused');
  const items = itemActivities({ db: dbOf(driver) });
  const viaCli = await yokeRefusalOf(
    items.updateItem({ sessionId: 'dr1', item: 'WEB-2', field: 'status', value: 'done' }),
  );
  expect(viaCli.code).toBe('done_gate_refused');
  await r.beginSettling({ runId });
  await expect(
    items.updateItem({ sessionId: 'dr1', item: 'WEB-2', field: 'status', value: 'done' }),
  ).resolves.toMatchObject({ status: 'done', completed_deliveries: [expect.objectContaining({ run: runId })] });
  // Done is never undone.
  expect(await refusalOf(agent.q("UPDATE backlog_items SET status = 'open' WHERE item_id = $1", [item]))).toBe(
    'item_done',
  );
  await r.settleNow({ runId }); // the run ends, so the next test's run may occupy the stage
});

test('D7 issue 12: a dependency not done refuses the raw done write in Postgres with dependency_unsatisfied, as delivery_ready is refused', async () => {
  const [docs, checkout] = [await itemId(3), await itemId(1)];
  await su.query("INSERT INTO item_dependencies (item_id, depends_on_item_id, environment) VALUES ($1, $2, '')", [
    docs,
    checkout,
  ]);
  try {
    const runId = await walkedRun(['WEB-3'], 'dependency');
    await pass(runId, 'smoke-test');
    await r.beginSettling({ runId });
    await expectRawDoneRefused(docs, 'WEB-3', runId, 'dependency_unsatisfied: WEB-3 depends on WEB-1 done');
    await r.terminalizeRun({ sessionId: 'dr1', runId, disposition: 'cancelled', reason: 'test done' });
  } finally {
    await su.query('DELETE FROM item_dependencies WHERE item_id = $1', [docs]);
  }
});

test('D7 issue 13: a blocking QA requirement still open on the closing run refuses the raw done write in Postgres', async () => {
  const item = await itemId(1);
  const runId = await walkedRun(['WEB-1'], 'open-qa');
  await pass(runId, 'smoke-test');
  await r.beginSettling({ runId });
  await expectRawDoneRefused(
    item,
    'WEB-1',
    runId,
    'done_gate_qa_open: blocking QA requirement WEB-1/checkout-e2e is pending',
  );
});

test("C5 W5 W7 issue 13: a user's raw INSERT writes the server's clock too: no session or claim heartbeating years ahead, no wait queued in the past or inserted as a turn; an ended session is history and keeps its times", async () => {
  const now = async () => (await su.query('SELECT clock_timestamp() AS t')).rows[0].t as Date;
  const near = async (at: Date) => Math.abs(at.getTime() - (await now()).getTime()) < 60_000;
  await holder.q(
    "INSERT INTO sessions (session_id, actor_id, offered_at, heartbeat_at) VALUES ('h6', $1, '2020-01-01', '2999-01-01')",
    [holder.name],
  );
  const [live] = (await su.query("SELECT offered_at, heartbeat_at FROM sessions WHERE session_id = 'h6'")).rows;
  expect([await near(live.offered_at), await near(live.heartbeat_at)]).toEqual([true, true]);
  // what `usage backfill` registers: a session found after the fact, offered when its transcript started
  await holder.q(
    "INSERT INTO sessions (session_id, actor_id, offered_at, heartbeat_at, ended_at, end_reason) VALUES ('h7', $1, '2020-01-01', '2020-01-02', '2020-01-02', 'backfill')",
    [holder.name],
  );
  const [history] = (await su.query("SELECT offered_at, ended_at FROM sessions WHERE session_id = 'h7'")).rows;
  expect([history.offered_at.toISOString(), history.ended_at.toISOString()]).toEqual([
    new Date('2020-01-01').toISOString(),
    new Date('2020-01-02').toISOString(),
  ]);
  // an end years ahead is an open session under an end's name: it ends now
  await holder.q(
    "INSERT INTO sessions (session_id, actor_id, offered_at, ended_at, end_reason) VALUES ('h8', $1, '2020-01-01', '2999-01-01', 'never')",
    [holder.name],
  );
  const [ahead] = (await su.query("SELECT ended_at FROM sessions WHERE session_id = 'h8'")).rows;
  expect(await near(ahead.ended_at)).toBe(true);

  // a claim: taken through the CLI's path, released, then inserted again raw with forged times
  const s = services(t.db);
  const taken = (await s.takeItem({ sessionId: 'h1', item: 'WEB-3' })).claim.claim_id;
  await su.query("UPDATE work_claims SET released_at = now(), release_reason = 'test' WHERE claim_id = $1", [taken]);
  const [forged] = await holder.q<{ claim_id: number }>(
    `INSERT INTO work_claims (target_kind, scope, key, project_id, session_id, claimed_at, heartbeat_at)
     SELECT target_kind, scope, key, project_id, session_id, '2020-01-01', '2999-01-01' FROM work_claims WHERE claim_id = $1
     RETURNING claim_id`,
    [taken],
  );
  const [claim] = (
    await su.query('SELECT claimed_at, heartbeat_at FROM work_claims WHERE claim_id = $1', [forged!.claim_id])
  ).rows;
  expect([await near(claim.claimed_at), await near(claim.heartbeat_at)]).toEqual([true, true]);
  await su.query("UPDATE work_claims SET released_at = now(), release_reason = 'test' WHERE claim_id = $1", [
    forged!.claim_id,
  ]);

  // a wait joins at the back of the line, waiting: never queued in the past, never a turn
  await su.query(
    `INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint, host_key_source,
       verify_command, capture_command) VALUES ('lab-w', 'h', 22, 'u', 'lab', 'k', 'f', 'host_key_file', 'true', 'true')`,
  );
  await holder.q(
    "INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, queued_at, resume_command, rationale) VALUES ('lab-w', 'h1', $1, '2020-01-01', 'x', 'y')",
    [holder.name],
  );
  const [wait] = (await su.query("SELECT queued_at FROM qa_test_machine_waits WHERE test_machine = 'lab-w'")).rows;
  expect(await near(wait.queued_at)).toBe(true);
  expect(
    await refusalOf(
      holder.q(
        "INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, state, claim_id, resume_command, rationale) VALUES ('lab-w', 'h6', $1, 'reserved', $2, 'x', 'y')",
        [holder.name, taken],
      ),
    ),
  ).toBe('permission_denied');
});

test('W2 W8 issue 13: a user cannot record a machine check, so it cannot make an unhealthy machine healthy; the worker can', async () => {
  await su.query(
    `INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint, host_key_source,
       verify_command, capture_command) VALUES ('lab-h', 'h', 22, 'u', 'lab', 'k', 'f', 'host_key_file', 'true', 'true')`,
  );
  await su.query(
    "INSERT INTO test_machine_checks (test_machine, kind, passed, reason, started_at, finished_at) VALUES ('lab-h', 'verification', false, 'exit_status_1', now(), now())",
  );
  const record = (who: SqlActor, passed: boolean, sid: string | null) =>
    who.q(
      `INSERT INTO test_machine_checks (test_machine, kind, passed, reason, session_id, started_at, finished_at)
       VALUES ('lab-h', 'verification', $1, 'forged', $2, now(), now() + interval '1 second')`,
      [passed, sid],
    );
  expect(await refusalOf(record(agent, true, 'ag1'))).toBe('permission_denied');
  expect(await refusalOf(record(agent, true, null))).toBe('permission_denied');
  expect(await refusalOf(record(agent, false, 'ag1'))).toBe('permission_denied');
  const unhealthy = async () => (await su.query("SELECT test_machine_unhealthy('lab-h') AS u")).rows[0].u as boolean;
  expect(await unhealthy()).toBe(true);
  expect(await refusalOf(record(worker, true, null))).toBe('allowed');
  expect(await unhealthy()).toBe(false);
});

test('C11 issue 13: an operator release by raw SQL writes exactly one WARNOperatorLeaseRelease, before the release lands; the CLI writes no second', async () => {
  const s = services(t.db);
  const take = (model: string) =>
    s.acquireCoordinationClaim({ sessionId: 'h1', key: `LIVE_DB_MIGRATION:${model}`, project: 'web', item: 'WEB-1' });
  const raw = (await take('orders')).claim.claim_id;
  const viaCli = (await take('billing')).claim.claim_id;
  await ops.q(
    "INSERT INTO work_claims (target_kind, scope, project_id, session_id) VALUES ('steering', '{}', $1, 'op1')",
    [web],
  );
  const events = async (claimId: number) =>
    (
      await su.query(
        "SELECT event_id, project_id, session_id, actor_id, payload, created_at FROM events WHERE event_type = 'WARNOperatorLeaseRelease' AND claim_id = $1",
        [claimId],
      )
    ).rows;
  const releasedAt = async (claimId: number) =>
    (await su.query('SELECT released_at FROM work_claims WHERE claim_id = $1', [claimId])).rows[0].released_at as Date;

  expect(
    await refusalOf(
      ops.q(
        "UPDATE work_claims SET released_at = now() - interval '1 day', release_reason = 'raw', released_by_session_id = 'op1' WHERE claim_id = $1",
        [raw],
      ),
    ),
  ).toBe('allowed');
  const [event, ...more] = await events(raw);
  expect(more).toEqual([]);
  expect(event).toMatchObject({
    project_id: web,
    session_id: 'op1',
    actor_id: ops.name,
    payload: {
      key: 'LIVE_DB_MIGRATION:orders',
      target_kind: 'migration_serialization',
      sticky: true,
      holder_session_id: 'h1',
      operator_session_id: 'op1',
      operator_actor_id: ops.name,
      reason: 'raw',
    },
  });
  expect(event.created_at.getTime()).toBeLessThanOrEqual((await releasedAt(raw)).getTime());

  const done = await services(dbOf(ops)).operatorRelease({
    actingSessionId: 'op1',
    key: 'LIVE_DB_MIGRATION:billing',
    claimId: viaCli,
    holderSessionId: 'h1',
    reason: 'author left',
    project: 'web',
  });
  const cliEvents = await events(viaCli);
  expect(cliEvents).toHaveLength(1);
  expect(done.operator_event_id).toBe(cliEvents[0].event_id);
  expect(cliEvents[0].payload).toMatchObject({
    holder_session_id: 'h1',
    operator_actor_id: ops.name,
    reason: 'author left',
  });
  expect(done.claim).toMatchObject({ release_reason: 'author left' });

  // An operator releasing a claim of its own actor: no trigger event (its own release), the CLI's one.
  const own = (
    await s.acquireCoordinationClaim({
      sessionId: 'op1',
      key: 'LIVE_DB_MIGRATION:ledger',
      project: 'web',
      item: 'WEB-1',
    })
  ).claim.claim_id;
  const mine = await services(dbOf(ops)).operatorRelease({
    actingSessionId: 'op1',
    key: 'LIVE_DB_MIGRATION:ledger',
    claimId: own,
    holderSessionId: 'op1',
    reason: 'mine',
    project: 'web',
  });
  expect((await events(own)).map((e) => e.event_id)).toEqual([mine.operator_event_id]);
});

test('C11 issue 13: a user who is no operator cannot write an operator-release event, nor a type its commands never write', async () => {
  for (const type of ['WARNOperatorLeaseRelease', 'PricingRevisionBackdated', 'Forged'])
    expect([
      type,
      await refusalOf(
        agent.q('INSERT INTO events (event_type, project_id, payload) VALUES ($1, $2, $3)', [type, web, '{}']),
      ),
    ]).toEqual([type, 'permission_denied']);
  // Issue 13: nor one of its types for a run it may not act on (0032_event_rule; authorityRules.test.ts).
  expect(
    await refusalOf(agent.q("INSERT INTO events (event_type, payload) VALUES ('DeploymentRunStageStarted', '{}')")),
  ).toBe('permission_denied');
});

test("C5 C8 issue 13: a user's raw heartbeat is never ahead of the server's clock nor its release or end behind it; an operator releases only from the seat's own session", async () => {
  const s = services(t.db);
  const claim = (await s.takeItem({ sessionId: 'h1', item: 'WEB-2' })).claim.claim_id;
  await holder.q("UPDATE work_claims SET heartbeat_at = '2999-01-01' WHERE claim_id = $1", [claim]);
  await holder.q("UPDATE sessions SET heartbeat_at = '2999-01-01' WHERE session_id = 'h1'");
  const now = async () => (await su.query('SELECT clock_timestamp() AS t')).rows[0].t as Date;
  const [claimRow] = (await su.query('SELECT heartbeat_at FROM work_claims WHERE claim_id = $1', [claim])).rows;
  const [sessionRow] = (await su.query("SELECT heartbeat_at FROM sessions WHERE session_id = 'h1'")).rows;
  expect(claimRow.heartbeat_at.getTime()).toBeLessThanOrEqual((await now()).getTime());
  expect(sessionRow.heartbeat_at.getTime()).toBeLessThanOrEqual((await now()).getTime());

  // an operator's release needs the seat on the session that releases, not on another of its actor's
  await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3)', ['op2', ops.name, web]);
  const seat = await ops.q<{ claim_id: number }>(
    "INSERT INTO work_claims (target_kind, scope, project_id, session_id) VALUES ('steering', '{}', $1, 'op1') ON CONFLICT DO NOTHING RETURNING claim_id",
    [web],
  );
  for (const session of ['op2', null])
    expect(
      await refusalOf(
        ops.q(
          "UPDATE work_claims SET released_at = now(), release_reason = 'raw', released_by_session_id = $2 WHERE claim_id = $1",
          [claim, session],
        ),
      ),
    ).toBe('steering_seat_required');
  expect(
    (await su.query('SELECT released_at FROM work_claims WHERE claim_id = $1', [claim])).rows[0].released_at,
  ).toBeNull();

  // the holder's own release, back-dated, is written as it happens
  const before = await now();
  await holder.q(
    "UPDATE work_claims SET released_at = '2020-01-01', release_reason = 'back-dated', released_by_session_id = 'h1' WHERE claim_id = $1",
    [claim],
  );
  const [released] = (await su.query('SELECT released_at FROM work_claims WHERE claim_id = $1', [claim])).rows;
  expect(released.released_at.getTime()).toBeGreaterThanOrEqual(before.getTime() - 1000);
  if (seat[0])
    await su.query("UPDATE work_claims SET released_at = now(), release_reason = 'test' WHERE claim_id = $1", [
      seat[0].claim_id,
    ]);
});
