import { Client } from 'pg';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines, services } from '../helpers/fixtures';
import { refusalOf, rolePools, sqlActors, type SqlActor } from '../helpers/roles';
import { applyWebRelease, walkedRun } from '../helpers/runs';

/**
 * Issue 13, rules a third audit found a user skipped by raw SQL under their own role
 * (0038_claim_rules): a released claim taken back or its release rewritten, claims the
 * CLI refuses inserted bare, an ended session brought back, a QA plan execution rewritten or
 * passed by its runner, and a run created by an actor who may not deploy refused with the bare
 * row-security message. The CLI's own paths, under the
 * actors' own roles, still pass.
 */
let t: TestDatabase;
let su: Client;
const actors = sqlActors(() => t.url);
let holder: SqlActor;
let waiter: SqlActor;
let web: number;
const pools = rolePools();
const dbOf = pools.dbOf;

beforeAll(async () => {
  t = await createTestDatabase();
  su = new Client({ connectionString: t.url });
  await su.connect();
  await applyWebRelease(t.db);
  await addTestMachines(services(t.db), ['lab-r', 'lab-sick', 'lab-q']);
  [holder, waiter] = [await actors.add('holder'), await actors.add('waiter')];
  web = (await su.query("SELECT project_id FROM projects WHERE name = 'web'")).rows[0].project_id;
  await su.query("INSERT INTO sessions (session_id, actor_id, project_id) VALUES ('dr1', 'driver', $1)", [web]);
  for (const [sid, who] of [
    ['h1', holder],
    ['h-ended', holder],
    ['w1', waiter],
  ] as const)
    await su.query('INSERT INTO sessions (session_id, actor_id, project_id) VALUES ($1, $2, $3)', [sid, who.name, web]);
  await su.query("UPDATE sessions SET ended_at = now(), end_reason = 'session_end' WHERE session_id = 'h-ended'");
});
afterAll(async () => {
  await pools.destroy();
  await actors.end();
  await su.end();
  await t.drop();
});

const claimRow = async (id: number) =>
  (
    await su.query('SELECT released_at, release_reason, released_by_actor_id FROM work_claims WHERE claim_id = $1', [
      id,
    ])
  ).rows[0];

test("issue 13 C11 C12: a released claim is history: its holder cannot take it back or rewrite its operator's release by raw SQL", async () => {
  const [inserted] = await holder.q<{ claim_id: number }>(
    `INSERT INTO work_claims (target_kind, scope, key, project_id, session_id)
     VALUES ('route_qualification', jsonb_build_object('project_id', $1::int, 'grant_key', 'g-1'), 'g-1', $1, 'h1')
     RETURNING claim_id`,
    [web],
  );
  const id = inserted!.claim_id;
  // An operator's release, recorded as the operator's command records it (C11).
  await su.query(
    "UPDATE work_claims SET released_at = now(), release_reason = 'stranded: operator', released_by_actor_id = 'ops' WHERE claim_id = $1",
    [id],
  );
  const released = await claimRow(id);
  const takeBack = holder.q(
    'UPDATE work_claims SET released_at = NULL, release_reason = NULL, released_by_actor_id = NULL WHERE claim_id = $1',
    [id],
  );
  expect(await refusalOf(takeBack)).toBe('permission_denied');
  expect(
    await refusalOf(holder.q("UPDATE work_claims SET release_reason = 'nothing happened' WHERE claim_id = $1", [id])),
  ).toBe('permission_denied');
  expect(
    await refusalOf(holder.q("UPDATE work_claims SET released_by_actor_id = 'someone' WHERE claim_id = $1", [id])),
  ).toBe('permission_denied');
  expect(await claimRow(id)).toEqual(released);
  // A late heartbeat on it changes nothing that matters and still passes.
  expect(await refusalOf(holder.q('UPDATE work_claims SET heartbeat_at = now() WHERE claim_id = $1', [id]))).toBe(
    'allowed',
  );

  // The holder's own release through the CLI's path is unchanged.
  const line = services(dbOf(holder));
  const held = await line.acquireCoordinationClaim({ sessionId: 'h1', key: 'g-2', project: 'web' });
  await line.releaseWorkClaim({ actingSessionId: 'h1', claimId: held.claim.claim_id, reason: 'done' });
  expect((await claimRow(held.claim.claim_id)).release_reason).toBe('done');
});

test('issue 13 C3 C12 W2: a raw claim insert by a user is held to the acquire rules; the CLI acquire under the same role passes', async () => {
  const insert = (who: SqlActor, sid: string, kind: string, scope: object, key: string | null, extra = '') =>
    who.q(
      `INSERT INTO work_claims (target_kind, scope, key, project_id, session_id${extra ? ', released_at, release_reason' : ''})
       VALUES ($1, $2::jsonb, $3, $4, $5${extra})`,
      [kind, JSON.stringify(scope), key, web, sid],
    );
  const qa = (machine: string) => ({ test_machine: machine });
  expect(await refusalOf(insert(holder, 'h-ended', 'steering', { project_id: web }, null))).toBe('session_ended');
  expect(await refusalOf(insert(holder, 'h1', 'deploy_serialization', {}, 'DEPLOY:web'))).toBe('deploy_lock_retired');
  expect(await refusalOf(insert(holder, 'h1', 'qa_admission', qa('no-such'), 'QA_HOST:no-such'))).toBe(
    'test_machine_unknown',
  );
  expect(
    await refusalOf(insert(holder, 'h1', 'qa_admission', qa('lab-r'), 'QA_HOST:lab-r', ", now(), 'born released'")),
  ).toBe('permission_denied');

  // W2: an unhealthy machine's line waits for a verification, which only the worker records.
  await su.query(
    "INSERT INTO test_machine_checks (test_machine, kind, passed, reason, started_at) VALUES ('lab-sick', 'verification', false, 'ssh_unavailable', now())",
  );
  expect(await refusalOf(insert(holder, 'h1', 'qa_admission', qa('lab-sick'), 'QA_HOST:lab-sick'))).toBe(
    'test_machine_unhealthy',
  );

  // A live waiter is served first: nobody's plain insert jumps it.
  await su.query(
    "INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, resume_command, rationale) VALUES ('lab-q', 'w1', $1, 'acquire w1', 'claim_held')",
    [waiter.name],
  );
  expect(await refusalOf(insert(holder, 'h1', 'qa_admission', qa('lab-q'), 'QA_HOST:lab-q'))).toBe('claim_held');
  // W7: a reserved turn is the line's hand-off to its oldest live waiter, never one's own way in.
  const reserve = (sid: string) =>
    holder.q(
      `INSERT INTO work_claims (target_kind, scope, key, project_id, session_id, reserved_until)
       VALUES ('qa_admission', '{"test_machine": "lab-q"}', 'QA_HOST:lab-q', $1, $2, now() + interval '100 years')`,
      [web, sid],
    );
  expect(await refusalOf(reserve('h1'))).toBe('claim_held');
  expect(await refusalOf(reserve('w1'))).toBe('allowed');
  await su.query("DELETE FROM work_claims WHERE scope->>'test_machine' = 'lab-q'");
  expect(
    (
      await su.query(
        "SELECT count(*)::int AS n FROM work_claims WHERE session_id IN ('h1', 'h-ended') AND released_at IS NULL AND target_kind <> 'route_qualification'",
      )
    ).rows[0].n,
  ).toBe(0);

  // The CLI's acquire of a free, healthy machine under the holder's own role.
  const taken = await services(dbOf(holder)).acquireCoordinationClaim({ sessionId: 'h1', key: 'QA_HOST:lab-r' });
  expect(taken.claim).toMatchObject({ session_id: 'h1', released_at: null });
});

test('issue 13: an ended session stays ended; its owner cannot bring it back by raw SQL', async () => {
  const revive = holder.q("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE session_id = 'h-ended'");
  expect(await refusalOf(revive)).toBe('session_ended');
  expect(await refusalOf(holder.q("UPDATE sessions SET end_reason = 'other' WHERE session_id = 'h-ended'"))).toBe(
    'session_ended',
  );
  expect(
    (await su.query("SELECT ended_at FROM sessions WHERE session_id = 'h-ended'")).rows[0].ended_at,
  ).not.toBeNull();
  // A live session's own heartbeat and end pass.
  await holder.q("UPDATE sessions SET heartbeat_at = now() WHERE session_id = 'h1'");
});

test('issue 13: a run created by an actor who may not deploy is refused permission_denied naming runs.deploy and the seat', async () => {
  let refusal: { code?: string; detail?: string; message?: string; hint?: string } = {};
  try {
    await holder.q(
      `INSERT INTO deployment_runs (run_id, project_id, flow_id, target_environment_id, candidate_sha, create_idempotency_key, create_request, created_by_session_id)
       SELECT 'run-forged', $1, f.flow_id, e.environment_id, 'a1b2c3d4', 'forged', '{}'::jsonb, 'h1'
         FROM flows f, environments e WHERE f.project_id = $1 AND e.project_id = $1 LIMIT 1`,
      [web],
    );
  } catch (err) {
    refusal = err as typeof refusal;
  }
  expect(refusal).toMatchObject({ code: 'YK001', detail: 'permission_denied' });
  expect(refusal.message).toContain('runs.deploy');
  expect(refusal.hint).toContain('yoke claims steering take --project web');
});

test('issue 13 Q: whoever began a QA plan execution cannot rewrite its plan, pass it, move it to another run, or insert one born passed by raw SQL; aborting it still passes', async () => {
  const runs = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
  const request = (key: string) => ({
    sessionId: 'dr1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'a1b2c3d4e5f6',
    idempotencyKey: key,
    items: [],
  });
  const runId = await walkedRun(runs, request('exec-1'));
  const other = (await runs.createRun(request('exec-2'))).run_id;
  const columns = `run_id, stage_name, plan_id, plan, session_id, target_environment, served_revision_path, delivered_commit, revision_check`;
  const values = `$1, 'stage-qa', 'checkout', '{"id": "checkout", "cases": [{"name": "api-smoke", "automatic": {"test_machine": "lab-r", "command": "true"}}, {"name": "looks", "manual": {"instructions": "look"}}]}', 'h1', 'stage', '/revision', 'a1b2c3d4e5f6', 'unverified'`;
  const id = (
    await su.query(`INSERT INTO qa_plan_executions (${columns}) VALUES (${values}) RETURNING execution_id`, [runId])
  ).rows[0].execution_id as number;
  const mine = (set: string, values: unknown[] = []) =>
    holder.q(`UPDATE qa_plan_executions SET ${set} WHERE execution_id = $1`, [id, ...values]);

  // The audit's statements: the automatic case dropped from the plan, then the execution passed.
  expect(await refusalOf(mine("plan = jsonb_set(plan, '{cases}', jsonb_build_array(plan->'cases'->1))"))).toBe(
    'permission_denied',
  );
  expect(await refusalOf(mine("status = 'passed', ended_at = now()"))).toBe('permission_denied');
  expect(await refusalOf(mine("status = 'failed', ended_at = now()"))).toBe('permission_denied');
  expect(await refusalOf(mine('run_id = $2', [other]))).toBe('run_driven_elsewhere');
  expect(
    await refusalOf(
      holder.q(`INSERT INTO qa_plan_executions (${columns}, status, ended_at) VALUES (${values}, 'passed', now())`, [
        runId,
      ]),
    ),
  ).toBe('permission_denied');
  expect(
    (await su.query('SELECT status, run_id FROM qa_plan_executions WHERE execution_id = $1', [id])).rows[0],
  ).toEqual({
    status: 'running',
    run_id: runId,
  });
  // Its runner still aborts it (yoke qa abort's write).
  expect(await refusalOf(mine("status = 'aborted', ended_at = now(), release_reason = 'aborted by its runner'"))).toBe(
    'allowed',
  );
});
