import { Client } from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, sqlActors, type SqlActor } from '../helpers/roles';

/**
 * Issue 13: every table in the schema, read from pg_catalog (so a table a later migration adds
 * is checked without being named here), is under forced row-level security; everyone reads
 * it (but for RESTRICTED_READS), admins and the worker write it, and a plain user writes only the tables and commands
 * below, each a write the specification gives users (their policies narrow it to the rule).
 * A migration that gives users a new write adds it here, with the rule that allows it.
 */
const USER_WRITES: Record<string, string[]> = {
  sessions: ['INSERT', 'UPDATE'], // register, heartbeat and end your own; S3 end a holder left empty by a run you settle
  work_claims: ['INSERT', 'UPDATE'], // C1 take with your own session; release yours; C8 C11 operator release; W7 turns; S1 delivered
  qa_test_machine_waits: ['INSERT', 'UPDATE'], // W4 join with your own session; W7 W9 the release hands the line on
  events: ['INSERT'], // insert-only, actor = session_user, the types users' commands write (C11: not the operator release's)
  backlog_items: ['INSERT', 'UPDATE'], // bare items named by users, moved along; D7 the done gate and attribution in a trigger
  session_usage: ['INSERT', 'UPDATE'], // U9 folds of your own sessions
  session_usage_fold_requests: ['INSERT'], // U10 --async fold requests for your own sessions
  deployment_runs: ['INSERT', 'UPDATE'], // I1 create where you may deploy; R1 drive
  deployment_run_items: ['ALL'], // R1 membership by the driver or a seat
  deployment_run_item_removals: ['ALL'],
  deployment_run_qa: ['ALL'], // R1 waivers and operator checks strict
  deployment_run_stages: ['ALL'], // R1 approvals strict
  deployment_run_occupancy: ['ALL'],
  qa_plan_executions: ['INSERT', 'UPDATE'], // Q1 begun with your own session
  qa_plan_execution_results: ['INSERT'], // R1 verdicts and waivers under your own role
  qa_plan_execution_leases: ['ALL'], // W6 your execution's leases
  deployment_run_memberships: ['INSERT', 'UPDATE'], // C10 D1 membership records follow the run's R1 rule
  deployment_run_member_artifacts: ['INSERT'], // C10 a member's artifacts uploaded under your own session
  deployment_run_member_effects: ['INSERT', 'UPDATE'], // S3 S5 a committed settlement's ledger, by the run's R1 rule
};

/**
 * Tables whose yoke_read policy is narrower than read-all, each with the rule it encodes (the
 * table's own test asserts what each role reads).
 */
const RESTRICTED_READS: Record<string, string> = {
  session_usage: 'U13 usage of the sessions the connected role may see (0047_usage_read_visibility)',
  session_usage_fold_requests:
    'U13 fold requests of the sessions the connected role may see (0052_fold_request_visibility)',
};

let t: TestDatabase;
let su: Client;
const actors = sqlActors(() => t.url);
let plain: SqlActor; // a yoke_user with no session, no grant, no seat
let tables: string[];

beforeAll(async () => {
  t = await createTestDatabase();
  su = new Client({ connectionString: t.url });
  await su.connect();
  plain = await actors.add('plain');
  tables = (
    await su.query<{ relname: string }>(
      "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') ORDER BY relname",
    )
  ).rows.map((r) => r.relname);
  // A row in the tables only admins write, so a user's UPDATE and DELETE have something to miss.
  const project = (
    await su.query("INSERT INTO projects (name, item_prefix) VALUES ('web', 'WEB') RETURNING project_id")
  ).rows[0].project_id;
  await su.query("INSERT INTO project_grants (project_id, actor_id, permission) VALUES ($1, 'ops', 'claims.release')", [
    project,
  ]);
  await su.query(
    "INSERT INTO environments (project_id, name, url, tier, occupancy_unit) VALUES ($1, 'stage', 'http://127.0.0.1:1', 'stage', 'http://127.0.0.1:1')",
    [project],
  );
  await su.query("INSERT INTO flows (project_id, name, stages) VALUES ($1, 'release', '[]')", [project]);
  await su.query(
    "INSERT INTO deploy_hosts (project_id, name, host, port, ssh_user, credential, host_key) VALUES ($1, 'app', 'h', 22, 'u', 'deploy', 'k')",
    [project],
  );
  await su.query(
    `INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint, host_key_source,
       verify_command, capture_command) VALUES ('lab', 'h', 22, 'u', 'lab', 'k', 'f', 'host_key_file', 'true', 'true')`,
  );
  await su.query("INSERT INTO qa_plans (project_id, plan_id, definition) VALUES ($1, 'p', '{}')", [project]);
  await su.query(
    "INSERT INTO pricing_revisions (revision_id, effective_at, source, rates) VALUES ('r1', now(), 'x', '{}')",
  );
  await su.query("INSERT INTO sessions (session_id, actor_id, project_id) VALUES ('s1', 'someone', $1)", [project]);
});
afterAll(async () => {
  await actors.end();
  await su.end();
  await t.drop();
});

test('I13 every table in the schema has row-level security enabled and forced, a read policy and a service policy', async () => {
  expect(tables.length).toBeGreaterThan(25);
  const { rows } = await su.query<{ relname: string; on: boolean; read: boolean; service: boolean }>(
    `SELECT c.relname, c.relrowsecurity AND c.relforcerowsecurity AS on,
            EXISTS (SELECT 1 FROM pg_policies p WHERE p.schemaname = 'public' AND p.tablename = c.relname
                     AND p.policyname = 'yoke_read' AND p.cmd = 'SELECT'
                     AND (p.qual = 'true') = NOT (c.relname = ANY($1))) AS read,
            EXISTS (SELECT 1 FROM pg_policies p WHERE p.schemaname = 'public' AND p.tablename = c.relname
                     AND p.policyname = 'yoke_service' AND p.cmd = 'ALL') AS service
       FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY c.relname`,
    [Object.keys(RESTRICTED_READS)],
  );
  expect(rows.filter((r) => !r.on || !r.read || !r.service)).toEqual([]);
});

test('I13 a plain user has write policies only where the specification gives users a write', async () => {
  const { rows } = await su.query<{ tablename: string; cmd: string }>(
    `SELECT tablename, cmd FROM pg_policies
      WHERE schemaname = 'public' AND cmd <> 'SELECT' AND policyname <> 'yoke_service'
        AND roles && ARRAY['yoke_user', 'public']::name[]
      ORDER BY tablename, cmd`,
  );
  const found: Record<string, string[]> = {};
  for (const r of rows) (found[r.tablename] ??= []).push(r.cmd);
  const expected = Object.fromEntries(Object.entries(USER_WRITES).map(([k, v]) => [k, [...v].sort()]));
  expect(found).toEqual(expected);
  // Nothing but these policies: no permissive policy for PUBLIC slips in beside them.
  const stray = await su.query(
    "SELECT tablename, policyname FROM pg_policies WHERE schemaname = 'public' AND policyname NOT LIKE 'yoke\\_%'",
  );
  expect(stray.rows).toEqual([]);
});

test('I13 a plain user cannot insert, update or delete in any table it has no write on (refused, or no row touched)', async () => {
  const touched: string[] = [];
  let updatable = 0;
  for (const table of tables) {
    const writes = USER_WRITES[table] ?? [];
    const may = (cmd: string) => writes.includes(cmd) || writes.includes('ALL');
    if (!may('INSERT')) {
      expect([table, await refusalOf(plain.q(`INSERT INTO ${table} DEFAULT VALUES`))]).toEqual([
        table,
        'permission_denied',
      ]);
    }
    const rows = Number((await su.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
    const column = (
      await su.query<{ attname: string }>(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attidentity = '' AND attgenerated = '' ORDER BY attnum LIMIT 1",
        [table],
      )
    ).rows[0]!.attname;
    for (const [cmd, statement] of [
      ['UPDATE', `UPDATE ${table} SET "${column}" = "${column}"`],
      ['DELETE', `DELETE FROM ${table}`],
    ] as const) {
      if (may(cmd)) continue;
      const c = new Client({ connectionString: plain.url });
      await c.connect();
      try {
        const r = await c.query(statement).then(
          (res) => res.rowCount ?? 0,
          (err: { code?: string }) => (err.code === '42501' || err.code === 'YK001' ? 0 : Promise.reject(err)),
        );
        if (r > 0) touched.push(`${cmd} ${table}`);
      } finally {
        await c.end();
      }
    }
    if (rows > 0 && !may('UPDATE')) updatable++;
    expect(Number((await su.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n)).toBe(rows);
  }
  expect(touched).toEqual([]);
  // The seeded admin tables (and the migration history) were there to be missed.
  expect(updatable).toBeGreaterThanOrEqual(10);
});

test('I13 W5 a user moving the line along cannot move a wait to the front, to another session or out of its settled state', async () => {
  const wait = (state: string) =>
    su
      .query(
        `INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, state, resume_command, rationale, settled_at, claim_id)
         VALUES ('lab', 's1', 'someone', $1, 'r', 'x', CASE WHEN $1 = 'waiting' THEN NULL ELSE now() END, NULL) RETURNING wait_id`,
        [state],
      )
      .then((r) => r.rows[0].wait_id as number);
  const open = await wait('waiting');
  const settled = await wait('cancelled');
  for (const change of [
    "queued_at = now() - interval '1 day'",
    "session_id = 's1', actor_id = session_user",
    "test_machine = 'other'",
  ])
    expect([
      change,
      await refusalOf(plain.q(`UPDATE qa_test_machine_waits SET ${change} WHERE wait_id = $1`, [open])),
    ]).toEqual([change, 'permission_denied']);
  expect(
    await refusalOf(
      plain.q("UPDATE qa_test_machine_waits SET state = 'waiting', settled_at = NULL WHERE wait_id = $1", [settled]),
    ),
  ).toBe('permission_denied');
  // Issue 13: another actor's live wait is not anyone's to cancel (0032_wait_owner_rule); the
  // hand-off's own cancellations (W9) are, once their cause is recorded: here, the session ended.
  const cancel = () =>
    plain.q(
      "UPDATE qa_test_machine_waits SET state = 'cancelled', settled_at = now(), cancel_reason = 'session_ended' WHERE wait_id = $1",
      [open],
    );
  expect(await refusalOf(cancel())).toBe('permission_denied');
  await su.query("UPDATE sessions SET ended_at = now(), end_reason = 'gone' WHERE session_id = 's1'");
  expect(await refusalOf(cancel())).toBe('allowed');
});
