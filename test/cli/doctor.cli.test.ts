import { randomInt } from 'node:crypto';
import { sql } from 'kysely';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { recordEvent } from '../../db/events';
import { MEMBER_CLOSED_EVENT } from '../../db/invariants';
import { json, jsonError, setUp, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { until } from '../helpers/until';

/**
 * `yoke doctor` against each invariant it checks: every violation is named with its subject
 * and its recovery (exit 1), and `yoke deployment-runs repair` is the recovery it names for
 * runs. The states are what a crash or a bug would leave; they are written directly.
 */

let t: TestDatabase;
let w: TestWorker;
let stage: HttpTarget;
let prod: HttpTarget;
let env: Record<string, string>;
const run = (args: string[]) => yoke(t.url, args, env);
/** The run the first test strands and repairs. */
let a: string;

beforeAll(async () => {
  t = await createTestDatabase();
  // Workflow ids are run ids: keep this file's apart from other test databases on the shared server.
  await sql`SELECT setval('deployment_run_numbers', ${randomInt(1_000_000, 1_000_000_000)})`.execute(t.db);
  w = await startTestWorker(t.db);
  [stage, prod] = await Promise.all([startHttpTarget(), startHttpTarget()]);
  env = {
    TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!,
    YOKE_TASK_QUEUE: w.taskQueue,
    YOKE_SESSION_ID: 'd1',
  };
  const file = writeDefinition(
    releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url }),
  );
  await setUp(run, [
    ['apply', '-f', file],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver'],
    ['sessions', 'register', '--session', 'gone', '--actor', 'other'],
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close()]);
  await w.shutdown();
  await t.drop();
});

/** A copy of `runId` with another id and status, occupying the same origins (what a bug could leave). */
async function cloneRun(runId: string, id: string, status: string) {
  await sql`
    INSERT INTO deployment_runs (run_id, project_id, flow_id, target_environment_id, candidate_sha, status,
                                 create_request, walk, executing_at, terminal_at)
    SELECT ${id}, project_id, flow_id, target_environment_id, candidate_sha, ${status},
           create_request, walk, executing_at, CASE WHEN ${status} = 'executing' THEN NULL ELSE now() END
      FROM deployment_runs WHERE run_id = ${runId}`.execute(t.db);
  await sql`INSERT INTO deployment_run_occupancy (run_id, unit)
            SELECT ${id}, unit FROM deployment_run_occupancy WHERE run_id = ${runId}`.execute(t.db);
}

test('yoke doctor names each invariant violation with its recovery and exits 1; deployment-runs repair and the named recoveries make it clean', async () => {
  expect((await run(['doctor'])).code).toBe(0); // a fresh database holds every invariant

  const r = deploymentRunActivities({ db: t.db });
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'hotfix',
    target: 'stage',
    candidate: 'd0c7000000000aa1',
    idempotencyKey: 'doctor-a',
    items: [],
  });
  a = created.run_id;
  await r.executeRun({ sessionId: 'd1', runId: a }); // executing, and no workflow: the CLI died after its commit
  await cloneRun(a, `${a}-twin`, 'executing'); // a second executing holder of A's origins
  await cloneRun(a, `${a}-ended`, 'failed'); // a terminal run that never released its origins
  // O1: a holder the occupancy check cannot see (its rows not marked live)
  await sql`UPDATE deployment_run_occupancy SET live = false WHERE run_id = ${a}`.execute(t.db);
  const web = await t.db
    .selectFrom('projects')
    .select('project_id')
    .where('name', '=', 'web')
    .executeTakeFirstOrThrow();
  for (let i = 0; i < 2; i++) {
    await recordEvent(t.db, {
      event_type: MEMBER_CLOSED_EVENT,
      project_id: web.project_id,
      payload: { item: 'WEB-1', run_id: a, released_claims: [] },
    });
  }
  const claim = await sql<{ claim_id: number }>`
    INSERT INTO work_claims (target_kind, scope, session_id, released_at, release_reason)
    VALUES ('qa_admission', '{"test_machine":"lab-b"}', 'd1', now(), 'released by a test')
    RETURNING claim_id`.execute(t.db);
  await sql`
    INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, state, claim_id, resume_command, rationale)
    VALUES ('lab-b', 'd1', 'driver', 'reserved', ${claim.rows[0]!.claim_id}, 'yoke qa resume', 'doctor test')`.execute(
    t.db,
  );
  await sql`
    INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, resume_command, rationale)
    VALUES ('lab-a', 'gone', 'other', 'yoke qa resume', 'doctor test')`.execute(t.db);
  await sql`UPDATE sessions SET ended_at = now(), end_reason = 'ended' WHERE session_id = 'gone'`.execute(t.db);

  const sick = await run(['doctor', '--json']);
  expect(sick.code).toBe(1);
  expect(jsonError(sick).code).toBe('invariant_violated');
  const report = json<{
    ok: boolean;
    violations: { invariant: string; subject: string; message: string; recovery: string }[];
  }>(sick);
  expect(report.ok).toBe(false);
  const named = (invariant: string, subject: string) =>
    report.violations.find((v) => v.invariant === invariant && v.subject === subject);
  const double = report.violations.find((v) => v.invariant === 'one_live_holder_per_unit');
  expect(double?.message).toContain(`${a}, ${a}-twin`);
  expect(double?.recovery).toContain('yoke deployment-runs terminalize');
  expect(named('executing_run_has_live_workflow', a)?.recovery).toBe(
    `yoke deployment-runs repair ${a} (the sweep's reconciler does the same)`,
  );
  expect(named('executing_run_has_live_workflow', `${a}-twin`)?.message).toContain('has no workflow');
  expect(named('no_terminal_run_occupies', `${a}-ended`)?.recovery).toContain(`repair ${a}-ended`);
  expect(named('no_member_closed_twice', `${a}/WEB-1`)?.message).toContain('closed 2 times');
  expect(named('occupying_run_marked_live', a)?.recovery).toBe(`yoke deployment-runs repair ${a} marks it live again`);
  expect(report.violations.find((v) => v.invariant === 'reserved_wait_has_live_claim')?.message).toContain('lab-b');
  expect(report.violations.find((v) => v.invariant === 'no_wait_of_ended_session')?.message).toContain(
    'session gone has ended',
  );
  for (const v of report.violations) expect(v.recovery.length).toBeGreaterThan(10);
  // Without --json the message names each invariant and the recovery each subject's way out.
  const plain = await run(['doctor']);
  expect(plain.code).toBe(1);
  for (const name of [
    'one_live_holder_per_unit',
    'executing_run_has_live_workflow',
    'no_terminal_run_occupies',
    'occupying_run_marked_live',
    'no_member_closed_twice',
    'reserved_wait_has_live_claim',
    'no_wait_of_ended_session',
  ])
    expect(plain.stderr).toContain(`[${name}]`);

  // watch says the stranded run will never move and names the repair, even within a --timeout
  // shorter than its second look is due (issue 10: the look is taken when the time is up)
  const bounded = await run(['deployment-runs', 'watch', a, '--timeout', '1', '--json']);
  expect(bounded.code).toBe(3);
  expect(jsonError(bounded).code).toBe('run_workflow_not_running');
  const stranded = await run(['deployment-runs', 'watch', a, '--json']);
  expect(stranded.code).toBe(3);
  expect(jsonError(stranded)).toMatchObject({
    code: 'run_workflow_not_running',
    recovery: expect.stringContaining(`yoke deployment-runs repair ${a}`),
  });
  expect(jsonError(stranded).message).toContain('does not exist');

  // The recoveries: repair the stranded run (its workflow starts and runs it) and the terminal holder.
  const repaired = await run(['deployment-runs', 'repair', a, '--json']);
  expect(repaired.code).toBe(0);
  expect(json(repaired)).toMatchObject({ run_id: a, workflow: 'started' });
  const marks = await sql<{ live: boolean }>`SELECT live FROM deployment_run_occupancy WHERE run_id = ${a}`.execute(
    t.db,
  );
  expect(marks.rows.length).toBeGreaterThan(0);
  expect(marks.rows.every((m) => m.live)).toBe(true);
  expect(json(await run(['deployment-runs', 'repair', `${a}-ended`, '--json']))).toMatchObject({
    workflow: 'occupancy_released',
  });
  const created2 = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'hotfix',
    target: 'stage',
    candidate: 'd0c7000000000bb2',
    idempotencyKey: 'doctor-b',
    items: [],
  });
  const notExecuting = await run(['deployment-runs', 'repair', created2.run_id, '--json']);
  expect(notExecuting.code).toBe(1);
  expect(jsonError(notExecuting)).toMatchObject({ code: 'run_not_executing' });
  expect(jsonError(notExecuting).recovery).toContain(`yoke deployment-runs execute ${created2.run_id}`);

  // What a bug left that has no command of its own is put right by hand, as the recoveries say.
  await sql`UPDATE deployment_runs SET status = 'cancelled', terminal_at = now(), occupancy_released_at = now()
             WHERE run_id = ${`${a}-twin`}`.execute(t.db);
  // The event log is append-only (a trigger refuses deletes): only an administrator lifting it
  // can take back the doubled close-out a bug wrote.
  await sql`ALTER TABLE events DISABLE TRIGGER USER`.execute(t.db);
  await sql`DELETE FROM events WHERE event_type = ${MEMBER_CLOSED_EVENT}`.execute(t.db);
  await sql`ALTER TABLE events ENABLE TRIGGER USER`.execute(t.db);
  await sql`UPDATE qa_test_machine_waits SET state = 'cancelled', settled_at = now()`.execute(t.db);
  await until(
    () => r.getRun({ runId: a }),
    (v) => v.status === 'succeeded',
    'the repaired run to succeed',
    { everyMs: 250 },
  );
  const clean = await run(['doctor', '--json']);
  expect(clean.stderr).toBe('');
  expect(clean.code).toBe(0);
  expect(json(clean)).toMatchObject({ ok: true, violations: [] });
}, 120_000);

test('migration 0013 releases the occupancy of runs that ended before 0007 recorded releases', async () => {
  const { up } = await import('../../db/migrations/0013_release_terminal_occupancy');
  const created = { run_id: a }; // succeeded, with its origins recorded
  await cloneRun(created.run_id, `${created.run_id}-old`, 'succeeded'); // ended under an older build
  expect((await run(['doctor'])).stderr).toContain(`run ${created.run_id}-old is succeeded but still occupies`);
  await up(t.db);
  const row = await t.db
    .selectFrom('deployment_runs')
    .select(['occupancy_released_at', 'terminal_at'])
    .where('run_id', '=', `${created.run_id}-old`)
    .executeTakeFirstOrThrow();
  expect(row.occupancy_released_at).toEqual(row.terminal_at);
  expect((await run(['doctor'])).stderr).not.toContain(`${created.run_id}-old`);
});
