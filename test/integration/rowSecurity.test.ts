import { Client } from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, sqlActors, type SqlActor } from '../helpers/roles';
import * as sessionUpdateGuard from '../../db/migrations/0056_session_update_guard';

/**
 * Issue 13, raw SQL: a client that skips the CLI connects as its own role and meets the same
 * rules. Every cell asserts allowed or the named refusal.
 */
let t: TestDatabase;
let su: Client;
const actors = sqlActors(() => t.url);
let alice: SqlActor; // a user with runs.deploy on web
let bob: SqlActor; // a user with nothing
let carol: SqlActor; // an operator: claims.release on web
let boss: SqlActor; // an admin
let worker: SqlActor; // the worker's login
let web: number;
let flow: number;
let env: number;

beforeAll(async () => {
  t = await createTestDatabase();
  su = new Client({ connectionString: t.url });
  await su.connect();
  [alice, bob, carol, boss, worker] = [
    await actors.add('alice'),
    await actors.add('bob'),
    await actors.add('carol'),
    await actors.add('boss', 'admin'),
    await actors.add('wrk', 'worker'),
  ];
  web = (await su.query("INSERT INTO projects (name, item_prefix) VALUES ('web', 'WEB') RETURNING project_id")).rows[0]
    .project_id;
  env = (
    await su.query(
      "INSERT INTO environments (project_id, name, url, tier, occupancy_unit) VALUES ($1, 'stage', 'http://127.0.0.1:1', 'stage', 'http://127.0.0.1:1') RETURNING environment_id",
      [web],
    )
  ).rows[0].environment_id;
  flow = (
    await su.query(
      `INSERT INTO flows (project_id, name, stages) VALUES ($1, 'release', '[{"name":"signoff","kind":"approval","target":"stage"}]') RETURNING flow_id`,
      [web],
    )
  ).rows[0].flow_id;
  for (const [sid, who] of [
    ['a1', alice],
    ['b1', bob],
    ['c1', carol],
  ] as const) {
    await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3)', [sid, who.name, web]);
  }
  await su.query("INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, $2, 'runs.deploy')", [
    web,
    alice.name,
  ]);
  await su.query("INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, $2, 'claims.release')", [
    web,
    carol.name,
  ]);
});
afterAll(async () => {
  await actors.end();
  await su.end();
  await t.drop();
});

async function newRun(id: string, driver: string | null): Promise<void> {
  await su.query(
    `INSERT INTO deployment_runs (run_id, project_id, flow_id, target_environment_id, candidate_sha, create_request, status,
       driver_session_id, driver_heartbeat_at) VALUES ($1, $2, $3, $4, 'abc', '{}', 'executing', $5, CASE WHEN $5::text IS NULL THEN NULL ELSE now() END)`,
    [id, web, flow, env, driver],
  );
  await su.query(
    "INSERT INTO deployment_run_stages (run_id, ordinal, name, kind, target_env, status) VALUES ($1, 0, 'signoff', 'approval', 'stage', 'waiting')",
    [id],
  );
  await su.query("INSERT INTO deployment_run_qa (run_id, check_name, source) VALUES ($1, 'smoke', 'flow-default')", [
    id,
  ]);
}

test('I13 every table in the public schema has row-level security enabled and forced (the list of gaps is empty)', async () => {
  const { rows } = await su.query<{ relname: string }>(
    `SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')
       AND NOT (relrowsecurity AND relforcerowsecurity) ORDER BY relname`,
  );
  expect(rows.map((r) => r.relname)).toEqual([]);
  // A table a later migration creates is covered the moment it exists.
  await su.query('CREATE TABLE later_feature (id int)');
  const later = await su.query(
    "SELECT relrowsecurity AND relforcerowsecurity AS on FROM pg_class WHERE relname = 'later_feature'",
  );
  expect(later.rows[0].on).toBe(true);
  expect(await refusalOf(bob.q('INSERT INTO later_feature VALUES (1)'))).toBe('permission_denied');
});

test('I13 sessions: a user registers, heartbeats and ends only its own; impersonation and ending another are refused', async () => {
  expect(await refusalOf(bob.q("INSERT INTO sessions (session_id, actor_id) VALUES ('imp', $1)", [alice.name]))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(bob.q("INSERT INTO sessions (session_id, actor_id) VALUES ('b2', $1)", [bob.name]))).toBe(
    'allowed',
  );
  const [own] = await bob.q<{ registered_by: string }>("SELECT registered_by FROM sessions WHERE session_id = 'b2'");
  expect(own!.registered_by).toBe(bob.name);
  expect(await refusalOf(bob.q("UPDATE sessions SET ended_at = now(), end_reason = 'x' WHERE session_id = 'a1'"))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(bob.q("UPDATE sessions SET heartbeat_at = now() WHERE session_id = 'b2'"))).toBe('allowed');
  expect(await refusalOf(bob.q("UPDATE sessions SET actor_id = $1 WHERE session_id = 'b2'", [alice.name]))).toBe(
    'permission_denied',
  );
  // An admin registers for another actor, recorded as registered by the admin.
  await boss.q("INSERT INTO sessions (session_id, actor_id) VALUES ('for-bob', $1)", [bob.name]);
  const [row] = await su
    .query("SELECT actor_id, registered_by FROM sessions WHERE session_id = 'for-bob'")
    .then((r) => r.rows);
  expect(row).toEqual({ actor_id: bob.name, registered_by: boss.name });
});

test.each([
  [
    'project_grants (self-grant)',
    "INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, session_user || $2, 'claims.release')",
  ],
  ['projects', "INSERT INTO projects (name, item_prefix) VALUES ('evil' || $2, 'EVIL' || $2) RETURNING $1::int"],
  [
    'environments',
    "INSERT INTO environments (project_id, name, url, tier, occupancy_unit) VALUES ($1, 'x' || $2, 'http://x', 'dev', 'http://x')",
  ],
  ['flows', "INSERT INTO flows (project_id, name, stages) VALUES ($1, 'f' || $2, '[]')"],
  [
    'deploy_hosts',
    "INSERT INTO deploy_hosts (project_id, name, host, port, ssh_user, credential, host_key) VALUES ($1, 'h' || $2, 'h', 22, 'u', 'deploy', 'k')",
  ],
  [
    'test_machines',
    "INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint, host_key_source, verify_command, capture_command) VALUES ('m' || $2, 'h', 22 + $1 - $1, 'u', 'lab', 'k', 'f', 'host_key_file', 'true', 'true')",
  ],
  [
    'pricing_revisions (back-dated)',
    "INSERT INTO pricing_revisions (revision_id, effective_at, source, rates) VALUES ('r' || $2, now() - interval '30 days' + ($2 || ' seconds')::interval, 'x', '{}') RETURNING $1::int",
  ],
])(
  'I13 admins only: %s is refused permission_denied for users and the worker, allowed for an admin',
  async (_name, statement) => {
    for (const who of [alice, bob, carol, worker]) {
      expect(await refusalOf(who.q(statement, [web, '1']))).toBe('permission_denied');
    }
    expect(await refusalOf(boss.q(statement, [web, '2']))).toBe('allowed');
  },
);

test('I13 C8 C11 claims: taken with your own session; released by the holder, or by an operator with the seat and the grant', async () => {
  const take = (who: SqlActor, sid: string, machine: string) =>
    who.q(
      `INSERT INTO work_claims (target_kind, scope, key, session_id) VALUES ('qa_admission', $1, $2, $3) RETURNING claim_id`,
      [JSON.stringify({ test_machine: machine }), `QA_HOST:${machine}`, sid],
    );
  // QA_HOST keys name registered machines (C3: 0038_claim_rules refuses the others).
  for (const machine of ['lab-x', 'lab-1', 'lab-2', 'lab-3'])
    await su.query(
      `INSERT INTO test_machines (name, host, port, ssh_user, host_key, host_key_fingerprint, host_key_source, verify_command, capture_command, credential)
       VALUES ($1, '127.0.0.1', 22, 'qa', 'ssh-ed25519 AAAA', 'SHA256:x', 'host_key_file', 'true', 'true', 'none')`,
      [machine],
    );
  expect(await refusalOf(bob.q('SELECT 1').then(() => take(bob, 'a1', 'lab-x')))).toBe('permission_denied');
  const [claim] = await take(alice, 'a1', 'lab-1');
  const id = (claim as { claim_id: number }).claim_id;
  const release = (who: SqlActor, sid: string) =>
    who.q(
      "UPDATE work_claims SET released_at = now(), release_reason = 'stuck', released_by_session_id = $2 WHERE claim_id = $1",
      [id, sid],
    );
  // No seat: steering_seat_required; not the holder and no operator: the same for bob.
  expect(await refusalOf(bob.q('UPDATE work_claims SET heartbeat_at = now() WHERE claim_id = $1', [id]))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(release(carol, 'c1'))).toBe('steering_seat_required');
  // A seat without the grant: permission_denied.
  await bob.q(
    "INSERT INTO work_claims (target_kind, scope, project_id, session_id) VALUES ('steering', '{}', $1, 'b1')",
    [web],
  );
  expect(await refusalOf(release(bob, 'b1'))).toBe('permission_denied');
  await bob.q(
    "UPDATE work_claims SET released_at = now(), release_reason = 'done' WHERE target_kind = 'steering' AND session_id = 'b1' AND released_at IS NULL",
  );
  // In another's name: refused; with the seat and the grant: allowed, recorded as carol.
  await carol.q(
    "INSERT INTO work_claims (target_kind, scope, project_id, session_id) VALUES ('steering', '{}', $1, 'c1')",
    [web],
  );
  expect(await refusalOf(release(carol, 'a1'))).toBe('permission_denied');
  expect(await refusalOf(release(carol, 'c1'))).toBe('allowed');
  const [row] = (await su.query('SELECT released_by_actor_id FROM work_claims WHERE claim_id = $1', [id])).rows;
  expect(row.released_by_actor_id).toBe(carol.name);
  await carol.q(
    "UPDATE work_claims SET released_at = now(), release_reason = 'done' WHERE target_kind = 'steering' AND session_id = 'c1' AND released_at IS NULL",
  );
  // The holder releases its own.
  const [own] = await take(alice, 'a1', 'lab-2');
  expect(
    await refusalOf(
      alice.q("UPDATE work_claims SET released_at = now(), release_reason = 'finished' WHERE claim_id = $1", [
        (own as { claim_id: number }).claim_id,
      ]),
    ),
  ).toBe('allowed');
  // A stolen claim: re-pointing the holder is refused.
  const [other] = await take(alice, 'a1', 'lab-3');
  expect(
    await refusalOf(
      bob.q("UPDATE work_claims SET session_id = 'b1' WHERE claim_id = $1", [(other as { claim_id: number }).claim_id]),
    ),
  ).toBe('permission_denied');
});

test('I13 R1 runs: created for projects you may deploy; driven by the driver or a seat; approval and waiver need the driver or a seat', async () => {
  const create = (who: SqlActor, id: string, sid: string) =>
    who.q(
      "INSERT INTO deployment_runs (run_id, project_id, flow_id, target_environment_id, candidate_sha, create_request, created_by_session_id) VALUES ($1, $2, $3, $4, 'abc', '{}', $5)",
      [id, web, flow, env, sid],
    );
  expect(await refusalOf(bob.q('SELECT 1').then(() => create(bob, 'r-bob', 'b1')))).toBe('permission_denied');
  expect(await refusalOf(create(alice, 'r-alice', 'a1'))).toBe('allowed');
  // Alice attaches herself as driver of her undriven run; bob may not attach alice's session.
  expect(
    await refusalOf(
      alice.q(
        "UPDATE deployment_runs SET driver_session_id = 'a1', driver_heartbeat_at = now() WHERE run_id = 'r-alice'",
      ),
    ),
  ).toBe('allowed');

  await newRun('r1', 'a1');
  const heartbeat = (who: SqlActor) =>
    who.q("UPDATE deployment_runs SET driver_heartbeat_at = now() WHERE run_id = 'r1'");
  const approve = (who: SqlActor) =>
    who.q("UPDATE deployment_run_stages SET status = 'passed' WHERE run_id = 'r1' AND name = 'signoff'");
  const waive = (who: SqlActor) =>
    who.q("UPDATE deployment_run_qa SET status = 'waived' WHERE run_id = 'r1' AND check_name = 'smoke'");
  const verdict = (who: SqlActor) =>
    who.q("UPDATE deployment_run_qa SET status = 'passed' WHERE run_id = 'r1' AND check_name = 'smoke'");
  expect(await refusalOf(heartbeat(bob))).toBe('run_driven_elsewhere');
  // the refusal names what was refused in words (0058: it read "cannot change on run")
  await expect(heartbeat(bob)).rejects.toThrow(`${bob.name} cannot make changes on run r1`);
  expect(await refusalOf(approve(bob))).toBe('run_driven_elsewhere');
  expect(await refusalOf(waive(bob))).toBe('run_driven_elsewhere');
  expect(await refusalOf(bob.q("UPDATE deployment_runs SET driver_session_id = 'b1' WHERE run_id = 'r1'"))).toBe(
    'run_driven_elsewhere',
  );
  // Issue 13: a passed or failed verdict is the driver's or a seat's, as qa-verdict requires (0032_run_qa_verdict_rule).
  expect(await refusalOf(verdict(bob))).toBe('run_driven_elsewhere');
  expect(await refusalOf(verdict(alice))).toBe('allowed');
  expect(await refusalOf(heartbeat(alice))).toBe('allowed');

  // No live driver: approval and waiver need the seat; with it, allowed.
  await newRun('r2', null);
  const approve2 = (who: SqlActor) =>
    who.q("UPDATE deployment_run_stages SET status = 'passed' WHERE run_id = 'r2' AND name = 'signoff'");
  const waive2 = (who: SqlActor) =>
    who.q("UPDATE deployment_run_qa SET status = 'waived' WHERE run_id = 'r2' AND check_name = 'smoke'");
  expect(await refusalOf(approve2(alice))).toBe('steering_seat_required');
  // Approving is writing who approved on the waiting stage (deployment-runs approve): strict too.
  expect(
    await refusalOf(
      alice.q("UPDATE deployment_run_stages SET detail = 'approved by me' WHERE run_id = 'r2' AND name = 'signoff'"),
    ),
  ).toBe('steering_seat_required');
  expect(await refusalOf(waive2(bob))).toBe('steering_seat_required');
  expect(await refusalOf(bob.q("UPDATE deployment_runs SET status = 'cancelled' WHERE run_id = 'r2'"))).toBe(
    'permission_denied',
  );
  await bob.q(
    "INSERT INTO work_claims (target_kind, scope, project_id, session_id) VALUES ('steering', '{}', $1, 'b1')",
    [web],
  );
  expect(await refusalOf(approve2(bob))).toBe('allowed');
  expect(await refusalOf(waive2(bob))).toBe('allowed');
  // The seat also acts on a run another actor drives (R1: hand-offs fall back to the seat).
  expect(await refusalOf(approve(bob))).toBe('allowed');
  await bob.q(
    "UPDATE work_claims SET released_at = now(), release_reason = 'done' WHERE target_kind = 'steering' AND session_id = 'b1' AND released_at IS NULL",
  );

  // The worker drives every run.
  expect(await refusalOf(worker.q("UPDATE deployment_runs SET current_stage = 'signoff' WHERE run_id = 'r1'"))).toBe(
    'allowed',
  );
});

test('I13 events are insert-only and name the connected role, whatever the writer claims', async () => {
  // Alice drives r1: she writes its events (0032_event_rule), under her own name whatever she claims.
  const [row] = await alice.q<{ actor_id: string }>(
    `INSERT INTO events (event_type, project_id, payload, actor_id) VALUES ('DeploymentRunStageStarted', $1, '{"run_id": "r1"}', $2)
     RETURNING actor_id`,
    [web, bob.name],
  );
  expect(row!.actor_id).toBe(alice.name);
  for (const who of [bob, boss, worker]) {
    expect(await refusalOf(who.q("UPDATE events SET event_type = 'Forged'"))).toBe('permission_denied');
    expect(await refusalOf(who.q('DELETE FROM events'))).toBe('permission_denied');
  }
});

test('I13 issue 16: sessions_own_only runs only to refuse (0056): its WHEN holds the refusal, and what it allows and refuses is the same before and after', async () => {
  await su.query("INSERT INTO sessions (session_id, actor_id) VALUES ('b3', $1), ('b4', $1)", [bob.name]);
  const outcomes = async () => [
    await refusalOf(bob.q("UPDATE sessions SET heartbeat_at = now() WHERE session_id = 'b3'")),
    await refusalOf(bob.q("UPDATE sessions SET served_model = 'm' WHERE session_id = 'b3'")),
    await refusalOf(bob.q("UPDATE sessions SET heartbeat_at = now() WHERE session_id = 'a1'")),
    await refusalOf(bob.q("UPDATE sessions SET registered_by = $1 WHERE session_id = 'b3'", [alice.name])),
    await refusalOf(bob.q("UPDATE sessions SET session_id = 'b3-renamed' WHERE session_id = 'b4'")),
    await refusalOf(worker.q("UPDATE sessions SET heartbeat_at = now() WHERE session_id = 'a1'")),
  ];
  const expected = ['allowed', 'allowed', 'permission_denied', 'permission_denied', 'permission_denied', 'allowed'];
  const def = async () =>
    (await su.query("SELECT pg_get_triggerdef(oid) AS d FROM pg_trigger WHERE tgname = 'sessions_own_only'")).rows[0].d;
  expect(await def()).toMatch(
    /WHEN \(\(\(NOT \(pg_has_role\(SESSION_USER, 'yoke_admin'.*old\.actor_id <> SESSION_USER/,
  );
  expect(await outcomes()).toEqual(expected);
  await sessionUpdateGuard.down(t.db);
  expect(await def()).not.toMatch(/old\.actor_id/);
  expect(await outcomes()).toEqual(expected);
  await sessionUpdateGuard.up(t.db);
  expect(await outcomes()).toEqual(expected);
});
