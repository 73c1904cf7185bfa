import { sql } from 'kysely';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { readQaPending } from '../../activities/qa/pending';
import { sessionActivities } from '../../activities/sessions';
import { YokeError } from '../../domain/errors';
import { fleetItems, qaFleetDefinition } from '../../bench/benchProject';
import { CountingPlugin } from '../../bench/countingPlugin';
import * as qaReaderMissingPlans from '../../db/migrations/0053_qa_reader_missing_plans';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { writeDefinition } from '../helpers/runs';

let t: TestDatabase;
const sizes = [1, 40];

beforeAll(async () => {
  t = await createTestDatabase();
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition(qaFleetDefinition(sizes, { deploy: 'last' })),
  });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 's', actorId: 's' });
}, 120_000);

afterAll(async () => t.drop());

/** A run of flow-1 with the one member B-1. */
const oneMemberRun = (idempotencyKey: string) =>
  deploymentRunActivities({ db: t.db }).createRun({
    sessionId: 's',
    project: 'bench',
    flow: 'flow-1',
    target: 'env-1',
    candidate: 'abcdef1234',
    idempotencyKey,
    items: ['B-1'],
  });

test('Q5 the blocking-QA read answers its whole run in a fixed number of statements: each waiting member once with its blockers, plus run obligations', async () => {
  const runs = deploymentRunActivities({ db: t.db });
  const counts: number[] = [];
  for (const n of [1, 40]) {
    const run = await runs.createRun({
      sessionId: 's',
      project: 'bench',
      flow: `flow-${n}`,
      target: `env-${n}`,
      candidate: 'abcdef1234',
      idempotencyKey: `k-${n}`,
      items: fleetItems(sizes, n),
    });
    const counter = new CountingPlugin();
    const report = await readQaPending(t.db.withPlugin(counter), { runId: run.run_id }, 10_000);
    counts.push(counter.count);
    expect(report.members).toHaveLength(n);
    const first = fleetItems(sizes, n)[0]!;
    expect(report.members.find((m) => m.item === first)).toEqual({
      item: first,
      stage_name: 'item-qa',
      blockers: [`${first}/e2e`, 'plan accept has no passed execution'],
      recovery: `begin a new execution: yoke qa begin --run ${run.run_id} --stage item-qa --plan accept --item ${first}`,
    });
    expect(report.run_obligations).toEqual([{ check_name: 'smoke', stage_name: 'run-qa', status: 'pending' }]);
    const scoped = await readQaPending(t.db, { runId: run.run_id, stage: 'run-qa' }, 10_000);
    expect(scoped.members).toEqual([]); // the item stage's members are not this stage's subjects
    expect(scoped.nothing_outstanding).toBe(false);
  }
  expect(counts[0]).toBe(counts[1]);
});

test('Q5 a control plane whose schema predates the stage report refuses scoped_qa_report_unavailable with the dispatch diagnostic and the upgrade recovery', async () => {
  const run = await oneMemberRun('k-older-server');
  // An older build's reader: the run only, no stage_name.
  await sql`ALTER FUNCTION deployment_qa_stage_outstanding(text, text) RENAME TO deployment_qa_stage_outstanding_now`.execute(
    t.db,
  );
  await sql`CREATE FUNCTION deployment_qa_stage_outstanding(p_run text)
              RETURNS TABLE (subject_kind text, subject text, stage_name text, status text, blockers text[])
              STABLE LANGUAGE sql AS $$ SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::text[] WHERE false $$`.execute(
    t.db,
  );
  try {
    const refused = await readQaPending(t.db, { runId: run.run_id, stage: 'item-qa' }, 10_000).catch((e) => e);
    expect(refused).toBeInstanceOf(YokeError);
    expect(refused.code).toBe('scoped_qa_report_unavailable');
    expect(refused.message).toMatch(/deployment_qa_stage_outstanding\(.*\) does not exist/);
    expect(refused.recovery).toContain('yoke db migrate');
    expect(refused.details).toMatchObject({ run_id: run.run_id, stage_name: 'item-qa' });
  } finally {
    await sql`DROP FUNCTION deployment_qa_stage_outstanding(text)`.execute(t.db);
    await sql`ALTER FUNCTION deployment_qa_stage_outstanding_now(text, text) RENAME TO deployment_qa_stage_outstanding`.execute(
      t.db,
    );
  }
  // Upgraded, the same read answers.
  expect((await readQaPending(t.db, { runId: run.run_id, stage: 'item-qa' }, 10_000)).members).toHaveLength(1);
});

test("Q1 Q4 0053: a member's recovery is built from the plan ids the reader returns, not parsed out of the blocker wording; an older reader refuses scoped_qa_report_unavailable and 0053 migrates down to it exactly", async () => {
  const run = await oneMemberRun('k-missing-plans');
  const definition = async () =>
    (
      await sql<{ def: string }>`
        SELECT pg_get_functiondef('deployment_qa_stage_outstanding(text, text)'::regprocedure) AS def`.execute(t.db)
    ).rows[0]!.def;
  const recovery = `begin a new execution: yoke qa begin --run ${run.run_id} --stage item-qa --plan accept --item B-1`;
  const current = await definition();
  // Reword the blocker: the recovery still names the plan, as it no longer reads the text.
  await sql
    .raw(current.replace("' has no passed execution'", "' is still waiting for a passed execution'"))
    .execute(t.db);
  try {
    const [member] = (await readQaPending(t.db, { runId: run.run_id }, 10_000)).members;
    expect(member!.blockers).toContain('plan accept is still waiting for a passed execution');
    expect(member!.recovery).toBe(recovery);
  } finally {
    await sql.raw(current).execute(t.db);
  }
  await qaReaderMissingPlans.down(t.db);
  try {
    const refused = await readQaPending(t.db, { runId: run.run_id }, 10_000).catch((e) => e);
    expect(refused).toBeInstanceOf(YokeError);
    expect(refused.code).toBe('scoped_qa_report_unavailable');
    expect(refused.message).toMatch(/missing_plans/);
  } finally {
    await qaReaderMissingPlans.up(t.db);
  }
  expect(await definition()).toBe(current);
  expect((await readQaPending(t.db, { runId: run.run_id }, 10_000)).members[0]!.recovery).toBe(recovery);
});

test('Q3 Q5 a member waiting only on its own check (no plan missing) is told the qa-verdict that settles it, not left without a recovery', async () => {
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition({
      project: 'plain',
      item_prefix: 'P',
      environments: [{ name: 'env-p', url: 'http://env-p.bench.test', tier: 'stage' }],
      flows: [
        {
          name: 'flow-p',
          delivery_custody: true,
          stages: [
            { name: 'item-qa', kind: 'qa', target: 'env-p', scope: 'item', checks: [{ name: 'accept' }] },
            { name: 'go', kind: 'auto', target: 'env-p' },
          ],
        },
      ],
      items: [
        {
          id: 'P-1',
          completion_flow: 'flow-p',
          obligations: [{ case: 'e2e', qa_phase: 'post_deploy', target_env: null }],
        },
      ],
    }),
  });
  const run = await deploymentRunActivities({ db: t.db }).createRun({
    sessionId: 's',
    project: 'plain',
    flow: 'flow-p',
    target: 'env-p',
    candidate: 'abcdef1234',
    idempotencyKey: 'k-plain',
    items: ['P-1'],
  });
  const [member] = (await readQaPending(t.db, { runId: run.run_id }, 10_000)).members;
  expect(member).toMatchObject({ item: 'P-1', blockers: expect.arrayContaining(['P-1/e2e']) });
  expect(member!.recovery).toContain(
    `record its verdict: yoke deployment-runs qa-verdict ${run.run_id} --check P-1/e2e --status passed|failed`,
  );
});
