import { sql } from 'kysely';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { memberAuthorityActivities } from '../../activities/memberAuthority';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { advisoryXactLock } from '../../db/advisoryLock';
import type { YokeError } from '../../domain/errors';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { counting, countStatements } from '../helpers/statements';
import { refusalOf } from '../helpers/fixtures';
import { releaseDefinition, writeDefinition } from '../helpers/runs';
import { startStallingProxy } from '../helpers/stallingProxy';
import { Client } from 'pg';
import { createDb } from '../../db/pool';
import * as qaReaderPinnedFlow from '../../db/migrations/0026_qa_reader_pinned_flow';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { readQaPending } from '../../activities/qa/pending';
import { runObligationActivities } from '../../activities/qa/runObligations';

let t: TestDatabase;
let r: DeploymentRunActivities;
const SHA = 'a1b2c3d4e5f6';

beforeEach(async () => {
  t = await createTestDatabase();
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
  const apply = projectDefinitionActivities({ db: t.db }).applyProjectDefinition;
  await apply({
    file: writeDefinition(
      releaseDefinition({
        project: 'web',
        prefix: 'WEB',
        stageUrl: 'http://stage.example.test',
        prodUrl: 'https://web.example.test',
      }),
    ),
  });
  // api's stage environment is on the same server as web's: one occupancy unit (O3)
  await apply({
    file: writeDefinition(
      releaseDefinition({
        project: 'api',
        prefix: 'API',
        stageUrl: 'HTTP://Stage.Example.Test:80/api',
        prodUrl: 'https://api.example.test',
      }),
    ),
  });
  const sessions = sessionActivities({ db: t.db });
  for (const id of ['d1', 'd2']) await sessions.registerSession({ sessionId: id, actorId: id });
});
afterEach(async () => {
  await t.drop();
});

const create = (over: Partial<Parameters<DeploymentRunActivities['createRun']>[0]> = {}) =>
  r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: SHA,
    idempotencyKey: 'k1',
    items: ['WEB-1'],
    ...over,
  });

async function stageStep(runId: string, ordinal: number, ok = true) {
  await r.beginStage({ runId, ordinal, walk: 1 });
  await r.finishStage({ runId, ordinal, walk: 1, result: { ok, detail: 'test' } });
}

describe('idempotent creation', () => {
  test('I1 the same key and request return the original run with replayed: true; the receipt shows idempotency_basis', async () => {
    const first = await create();
    expect(first).toMatchObject({
      replayed: false,
      idempotency_key: 'k1',
      idempotency_basis: 'recorded_key',
      status: 'created',
    });
    const again = await create({ items: ['web-1'], candidate: SHA.toUpperCase() }); // canonical form: same request
    expect(again).toMatchObject({ run_id: first.run_id, replayed: true });
    const stored = await t.db
      .selectFrom('deployment_runs')
      .select(['create_idempotency_key', 'create_request'])
      .where('run_id', '=', first.run_id)
      .executeTakeFirstOrThrow();
    expect(stored).toMatchObject({
      create_idempotency_key: 'k1',
      create_request: { project: 'web', flow: 'release', target: 'stage', candidate: SHA, items: ['WEB-1'] },
    });
  });

  test('I1 the same key with a changed input refuses idempotency_key_conflict naming the run and the differing fields', async () => {
    const first = await create();
    const conflict = await refusalOf(create({ candidate: 'ffffffffff', items: ['WEB-1', 'WEB-2'] }));
    expect(conflict.code).toBe('idempotency_key_conflict');
    expect(conflict.message).toContain(first.run_id);
    expect(conflict.details).toMatchObject({ run_id: first.run_id, differing_fields: ['candidate', 'items'] });
    expect(await t.db.selectFrom('deployment_runs').select('run_id').execute()).toHaveLength(1);
    // the key is per project: another project may use it
    await expect(create({ project: 'api', items: ['API-1'] })).resolves.toMatchObject({ replayed: false });
  });

  test('I1 race: 20 concurrent creates with one key make one run and 19 replays', async () => {
    const pools = Array.from({ length: 20 }, () => deploymentRunActivities({ db: t.connect(1) }));
    const receipts = await Promise.all(
      pools.map((p) =>
        p.createRun({
          project: 'web',
          flow: 'release',
          target: 'stage',
          candidate: SHA,
          idempotencyKey: 'same',
          items: ['WEB-2'],
        }),
      ),
    );
    expect(new Set(receipts.map((x) => x.run_id)).size).toBe(1);
    expect(receipts.filter((x) => x.replayed)).toHaveLength(19);
  });

  test('O5 creation serializes per project under a transaction-scoped advisory lock; a timeout says so', async () => {
    const project = await t.db
      .selectFrom('projects')
      .select('project_id')
      .where('name', '=', 'web')
      .executeTakeFirstOrThrow();
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const holder = t
      .connect(1)
      .transaction()
      .execute(async (trx) => {
        await advisoryXactLock(trx, `run-create:${project.project_id}`);
        await held;
      });
    await new Promise((x) => setTimeout(x, 100));
    // another project's creation is not behind web's lock
    await expect(create({ project: 'api', items: [], idempotencyKey: 'api-1' })).resolves.toMatchObject({
      replayed: false,
    });
    // Its own key: a create abandoned by its caller may still commit once the lock frees (I2
    // repeats under the same key for exactly that reason), which is not what this test watches.
    const timedOut = await refusalOf(create({ timeoutMs: 300, idempotencyKey: 'k-timed-out' }));
    expect(timedOut).toMatchObject({ code: 'deployment_run_create_timeout', kind: 'unreachable' });
    const waiting = create();
    release();
    await holder;
    await expect(waiting).resolves.toMatchObject({ replayed: false });
  });
});

test('I2 the whole create is bounded: a connection that stops answering times out instead of waiting forever', async () => {
  const proxy = await startStallingProxy(t.url);
  const db = createDb(proxy.url, { max: 2 });
  try {
    const stalled = deploymentRunActivities({ db });
    await expect(stalled.listRuns({ project: 'web' })).resolves.toEqual([]); // the hop works
    proxy.stall();
    const refused = await refusalOf(
      stalled.createRun({
        project: 'web',
        flow: 'release',
        target: 'stage',
        candidate: SHA,
        idempotencyKey: 'hung',
        items: ['WEB-1'],
        timeoutMs: 500,
      }),
    );
    expect(refused).toMatchObject({ code: 'deployment_run_create_timeout', kind: 'unreachable' });
  } finally {
    proxy.resume();
    await db.destroy();
    await proxy.close();
  }
});

describe('membership and admission', () => {
  test('D3 members are deployment_run_items rows; zero members is a valid environment-level deploy', async () => {
    const withItems = await create({ items: ['WEB-1', 'WEB-2'] });
    const rows = await t.db
      .selectFrom('deployment_run_items')
      .select([
        'run_id',
        'item_id',
        'added_at',
        'delivery_intent',
        'requirement_selection',
        'requirement_snapshot',
        'containment_attestation',
      ])
      .where('run_id', '=', withItems.run_id)
      .execute();
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatchObject({
      delivery_intent: 'final',
      requirement_selection: null,
      requirement_snapshot: null,
      containment_attestation: null,
    });
    const empty = await create({ items: [], idempotencyKey: 'env-only' });
    expect(empty.member_items).toEqual([]);
    await expect(r.executeRun({ sessionId: 'd1', runId: empty.run_id })).resolves.toMatchObject({
      status: 'executing',
    });
  });

  test('D5 a derived selection is validated but not stored; the freeze derives again and writes it back concrete', async () => {
    const run = await create();
    const before = await r.getRun({ runId: run.run_id });
    // unwaived, unsuperseded, unbound post-deploy rows without plan_id on a QA-stage target; never pre-merge
    expect(before.member_items![0]).toMatchObject({
      item: 'WEB-1',
      requirement_selection: ['WEB-1/checkout-e2e'],
      selection_derived: true,
    });
    // an obligation minted between admission and the freeze belongs in the frozen list
    const item = await t.db
      .selectFrom('backlog_items')
      .select('item_id')
      .where('number', '=', 1)
      .where('project_id', '=', sql<number>`(SELECT project_id FROM projects WHERE name = 'web')`)
      .executeTakeFirstOrThrow();
    await t.db
      .insertInto('item_qa_cases')
      .values({ item_id: item.item_id, case_key: 'late-case', qa_phase: 'post_deploy', target_env: 'stage' })
      .execute();
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    const row = await t.db
      .selectFrom('deployment_run_items')
      .select('requirement_selection')
      .where('run_id', '=', run.run_id)
      .executeTakeFirstOrThrow();
    expect(row.requirement_selection).toEqual(['WEB-1/checkout-e2e', 'WEB-1/late-case']);
    const frozen = await r.getRun({ runId: run.run_id });
    expect(frozen.carried_work).toEqual({
      recorded: true,
      items: [{ item: 'WEB-1', requirement_ids: ['WEB-1/checkout-e2e', 'WEB-1/late-case'], derived: true }],
    });
  });

  test('D5 an explicit --requirement-id / --plan-id selection is stored verbatim; an unknown one is refused', async () => {
    const run = await create({ requirementIds: ['WEB-1/prod-canary'], planIds: ['PLAN-7'] });
    const row = await t.db
      .selectFrom('deployment_run_items')
      .select('requirement_selection')
      .where('run_id', '=', run.run_id)
      .executeTakeFirstOrThrow();
    expect(row.requirement_selection).toEqual(['WEB-1/prod-canary', 'PLAN-7']);
    const unknown = await refusalOf(create({ idempotencyKey: 'k2', requirementIds: ['WEB-1/nope'] }));
    expect(unknown.code).toBe('unknown_requirement');
    expect(
      await t.db.selectFrom('deployment_runs').select('run_id').where('create_idempotency_key', '=', 'k2').execute(),
    ).toEqual([]);
  });

  test('D5 an explicit selection belongs to the members it names; the others derive theirs', async () => {
    const run = await create({ items: ['WEB-1', 'WEB-2'], requirementIds: ['WEB-1/checkout-e2e'] });
    const view = await r.getRun({ runId: run.run_id, fields: ['member_items'] });
    expect(view.member_items!.map((m) => [m.item, m.requirement_selection, m.selection_derived])).toEqual([
      ['WEB-1', ['WEB-1/checkout-e2e'], false],
      ['WEB-2', ['WEB-2/gift-smoke'], true],
    ]);
    const rows = await t.db
      .selectFrom('deployment_run_items')
      .select('requirement_selection')
      .where('run_id', '=', run.run_id)
      .orderBy('item_id')
      .execute();
    expect(rows.map((x) => x.requirement_selection)).toEqual([['WEB-1/checkout-e2e'], null]);
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    const frozen = await r.getRun({ runId: run.run_id, fields: ['carried_work'] });
    expect(frozen.carried_work!.items).toEqual([
      { item: 'WEB-1', requirement_ids: ['WEB-1/checkout-e2e'], derived: false },
      { item: 'WEB-2', requirement_ids: ['WEB-2/gift-smoke'], derived: true },
    ]);
  });

  test('D5 a bare requirement id or plan id that matches no member is refused naming it, and nothing is written', async () => {
    const before = await t.db.selectFrom('deployment_runs').select('run_id').execute();
    const bare = await refusalOf(
      create({ idempotencyKey: 'bare', items: ['WEB-1', 'WEB-2'], requirementIds: ['nope'] }),
    );
    expect(bare).toMatchObject({ code: 'unknown_requirement', details: { requirement_id: 'nope' } });
    expect(bare.message).toContain('nope');
    const plan = await refusalOf(create({ idempotencyKey: 'plan', items: ['WEB-2'], planIds: ['PLAN-7'] }));
    expect(plan).toMatchObject({ code: 'unknown_plan', details: { plan_id: 'PLAN-7' } });
    expect(await t.db.selectFrom('deployment_runs').select('run_id').execute()).toEqual(before);
    // a bare case id belongs to the member that declares it
    const ok = await create({ idempotencyKey: 'bare-ok', items: ['WEB-1', 'WEB-2'], requirementIds: ['gift-smoke'] });
    const view = await r.getRun({ runId: ok.run_id, fields: ['member_items'] });
    expect(view.member_items!.map((m) => m.requirement_selection)).toEqual([['WEB-1/checkout-e2e'], ['gift-smoke']]);
  });

  test('D5 plan ids are stored verbatim on the member whose obligations carry them and roll up its cases', async () => {
    const run = await create({ items: ['WEB-1', 'WEB-2'], planIds: ['PLAN-7'] });
    const rows = await t.db
      .selectFrom('deployment_run_items')
      .select('requirement_selection')
      .where('run_id', '=', run.run_id)
      .orderBy('item_id')
      .execute();
    expect(rows.map((x) => x.requirement_selection)).toEqual([['PLAN-7'], null]);
    const qa = await t.db
      .selectFrom('deployment_run_qa')
      .select('check_name')
      .where('run_id', '=', run.run_id)
      .where('source', '=', 'item-rollup')
      .orderBy('check_name')
      .execute();
    expect(qa.map((q) => q.check_name)).toEqual(['WEB-1/planned', 'WEB-2/gift-smoke']);
  });

  test('D5 the freeze re-derives roll-ups: an obligation waived since admission no longer holds the QA stage', async () => {
    const run = await create();
    const item = await t.db
      .selectFrom('backlog_items')
      .select('item_id')
      .where('number', '=', 1)
      .where('project_id', '=', sql<number>`(SELECT project_id FROM projects WHERE name = 'web')`)
      .executeTakeFirstOrThrow();
    await t.db
      .updateTable('item_qa_cases')
      .set({ waived: true })
      .where('item_id', '=', item.item_id)
      .where('case_key', '=', 'checkout-e2e')
      .execute();
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    const live = await t.db
      .selectFrom('deployment_run_qa')
      .select('check_name')
      .where('run_id', '=', run.run_id)
      .where('retracted_at', 'is', null)
      .where('blocking', '=', true)
      .orderBy('check_name')
      .execute();
    expect(live.map((q) => q.check_name)).toEqual(['smoke-test']);
  });

  test('D6 an obligation no QA stage targets is named with its row, declared environment and the stage targets', async () => {
    const run = await create();
    expect(run.warnings).toEqual([
      expect.objectContaining({
        requirement_id: 'WEB-1/prod-canary',
        declared_environment: 'production',
        run_stage_targets: ['stage'],
      }),
    ]);
    const added = await r.addItem({
      sessionId: 'd1',
      runId: run.run_id,
      item: 'WEB-2',
      requirementIds: [],
      planIds: [],
    });
    expect(added.warnings).toEqual([]);
    const hotfix = await create({ flow: 'hotfix', idempotencyKey: 'hf' });
    expect(hotfix.warnings.map((w) => ('requirement_id' in w ? w.requirement_id : w.code))).toEqual([
      'WEB-1/checkout-e2e',
      'WEB-1/planned',
      'WEB-1/prod-canary',
    ]);
    expect(hotfix.warnings[0]!.message).toContain('no environment');
  });

  test('D6 an obligation with no target_env on a flow without a QA stage is named', async () => {
    const item = await t.db
      .selectFrom('backlog_items')
      .select('item_id')
      .where('number', '=', 3)
      .where('project_id', '=', sql<number>`(SELECT project_id FROM projects WHERE name = 'web')`)
      .executeTakeFirstOrThrow();
    await t.db
      .insertInto('item_qa_cases')
      .values({ item_id: item.item_id, case_key: 'anywhere', qa_phase: 'post_deploy', target_env: null })
      .execute();
    const hotfix = await create({ flow: 'hotfix', idempotencyKey: 'hf3', items: ['WEB-3'] });
    expect(hotfix.warnings).toEqual([
      expect.objectContaining({ requirement_id: 'WEB-3/anywhere', declared_environment: null, run_stage_targets: [] }),
    ]);
    // on a flow with a QA stage it is selected, not named
    const release = await create({ idempotencyKey: 'rel3', items: ['WEB-3'] });
    expect(release.warnings).toEqual([]);
    const view = await r.getRun({ runId: release.run_id, fields: ['member_items'] });
    expect(view.member_items![0]!.requirement_selection).toEqual(['WEB-3/anywhere']);
  });

  test('Q3 deployment_run_qa rows are materialized at creation from flow defaults and item roll-ups', async () => {
    const run = await create({ items: ['WEB-1', 'WEB-2'] });
    const qa = await t.db
      .selectFrom('deployment_run_qa')
      .select(['check_name', 'source', 'blocking', 'status', 'stage_name'])
      .where('run_id', '=', run.run_id)
      .orderBy('check_name')
      .execute();
    expect(qa).toEqual([
      {
        check_name: 'WEB-1/checkout-e2e',
        source: 'item-rollup',
        blocking: true,
        status: 'pending',
        stage_name: 'stage-qa',
      },
      {
        check_name: 'WEB-2/gift-smoke',
        source: 'item-rollup',
        blocking: true,
        status: 'pending',
        stage_name: 'stage-qa',
      },
      { check_name: 'smoke-test', source: 'flow-default', blocking: true, status: 'pending', stage_name: 'stage-qa' },
    ]);
  });

  test('D4 start-for-item creates, enrols and validates in one transaction; a refusal writes nothing', async () => {
    const started = await r.startForItem({ sessionId: 'd1', items: ['WEB-2'], candidate: SHA });
    expect(started).toMatchObject({
      project: 'web',
      flow: 'release',
      target: 'production',
      member_items: ['WEB-2'],
      idempotency_basis: null,
    });
    const runsBefore = await t.db.selectFrom('deployment_runs').select('run_id').execute();
    expect((await refusalOf(r.startForItem({ items: ['WEB-1', 'API-1'], candidate: SHA }))).code).toBe(
      'items_span_projects',
    );
    expect(
      (await refusalOf(r.startForItem({ items: ['WEB-1'], candidate: SHA, requirementIds: ['WEB-1/missing'] }))).code,
    ).toBe('unknown_requirement');
    expect(await t.db.selectFrom('deployment_runs').select('run_id').execute()).toEqual(runsBefore);
    expect(
      await t.db
        .selectFrom('deployment_run_items')
        .select('run_id')
        .where(
          'run_id',
          'not in',
          runsBefore.map((x) => x.run_id),
        )
        .execute(),
    ).toEqual([]);
  });

  test('D1 get lists members and audited removals; carried_work is derived live before the freeze and recorded at it', async () => {
    const run = await create({ items: ['WEB-1', 'WEB-2'] });
    const live = await r.getRun({ runId: run.run_id, fields: ['carried_work'] });
    expect(live).toEqual({ run_id: run.run_id, carried_work: { recorded: false, items: expect.any(Array) } });
    const removed = await r.removeItem({
      sessionId: 'd1',
      runId: run.run_id,
      item: 'WEB-2',
      reason: 'moved to the next release',
    });
    expect(removed).toMatchObject({ item: 'WEB-2', reason: 'moved to the next release', later_run_id: null });
    const next = await create({ idempotencyKey: 'k-next', items: ['WEB-2'] });
    const view = await r.getRun({ runId: run.run_id, fields: ['member_items', 'membership_removals'] });
    expect(view.member_items!.map((m) => m.item)).toEqual(['WEB-1']);
    expect(view.membership_removals).toEqual([
      expect.objectContaining({
        item: 'WEB-2',
        reason: 'moved to the next release',
        later_run_id: next.run_id,
        removed_at: expect.any(String),
      }),
    ]);
    // the membership record (C10's read) knows where it went too
    expect(
      (await memberAuthorityActivities({ db: t.db }).readRequirements({ item: 'WEB-2', runId: run.run_id })).membership,
    ).toMatchObject({ ended_by: 'removed', later_run_id: next.run_id });
    // its unsettled roll-up was retracted with the removal
    const rollup = await t.db
      .selectFrom('deployment_run_qa')
      .select(['retraction'])
      .where('run_id', '=', run.run_id)
      .where('check_name', '=', 'WEB-2/gift-smoke')
      .executeTakeFirstOrThrow();
    expect(rollup.retraction).toBe('manual');
    // D1: only a newer run stamps later_run_id; an older run admitting the item does not
    const older = await create({ idempotencyKey: 'k-older', items: ['WEB-1'] });
    const newer = await create({ idempotencyKey: 'k-newer', items: ['WEB-3'] });
    await r.removeItem({ sessionId: 'd1', runId: newer.run_id, item: 'WEB-3', reason: 'not ready' });
    await r.addItem({ sessionId: 'd1', runId: older.run_id, item: 'WEB-3', requirementIds: [], planIds: [] });
    const newerView = await r.getRun({ runId: newer.run_id, fields: ['membership_removals'] });
    expect(newerView.membership_removals).toEqual([expect.objectContaining({ item: 'WEB-3', later_run_id: null })]);
    await expect(refusalOf(r.getRun({ runId: run.run_id, fields: ['nope'] }))).resolves.toMatchObject({
      code: 'unknown_run_field',
      kind: 'usage',
    });
  });

  test('D2 member_closure appears only when asked, changes nothing, and describes member settlement with atomic siblings, prerequisites and release_lineage in a fixed number of statements', async () => {
    const run = await create({ items: ['WEB-1', 'WEB-2', 'WEB-3'] });
    expect(await r.getRun({ runId: run.run_id })).not.toHaveProperty('member_closure');
    // settling: delivery reads as discharged; WEB-2's own row passes, WEB-1's stays pending
    await sql`UPDATE deployment_runs SET status = 'executing', executing_at = now(), settling_at = now()
               WHERE run_id = ${run.run_id}`.execute(t.db);
    await sql`UPDATE deployment_run_qa SET status = 'passed'
               WHERE run_id = ${run.run_id} AND check_name = 'WEB-2/gift-smoke'`.execute(t.db);
    await sql`INSERT INTO item_dependencies (item_id, depends_on_item_id)
              SELECT a.item_id, b.item_id FROM backlog_items a, backlog_items b, projects p
               WHERE p.item_prefix = 'WEB' AND a.project_id = p.project_id AND b.project_id = p.project_id
                 AND a.number = 3 AND b.number = 2`.execute(t.db);
    const snapshot = async () =>
      JSON.stringify(
        await Promise.all(
          ['deployment_runs', 'deployment_run_items', 'deployment_run_qa', 'item_qa_cases', 'backlog_items'].map(
            (table) => sql`SELECT * FROM ${sql.table(table)} ORDER BY 1, 2`.execute(t.db).then((x) => x.rows),
          ),
        ),
      );
    const before = await snapshot();
    const view = await r.getRun({ runId: run.run_id, includeMemberClosure: true });
    const closure = view.member_closure!;
    expect(closure.release_lineage.map((l) => l.run_id)).toEqual([run.run_id]);
    const [web1, web2, web3] = closure.members;
    // WEB-1 is blocked by its own open QA, not by a count of run-bound rows
    expect(web1).toMatchObject({
      item: 'WEB-1',
      requirement_ids: ['WEB-1/checkout-e2e'],
      phases: ['post_deploy'],
      targets: ['stage'],
      settlement: 'blocked',
      blocked: true,
      held_with_run: false,
      atomic_siblings: ['WEB-2', 'WEB-3'],
      other_target_deferrals: [expect.stringContaining('WEB-1/prod-canary declares environment production')],
    });
    expect(web1!.blocked_reasons.map((b) => b.code)).toEqual(['done_gate_qa_open']);
    expect(web1!.blocked_reasons[0]!.message).toContain('WEB-1/checkout-e2e is pending');
    // WEB-2 is clear but held: the commit closes the whole set or none of it
    expect(web2).toMatchObject({
      item: 'WEB-2',
      settlement: 'clear',
      blocked: false,
      blocked_reasons: [],
      held_with_run: true,
      atomic_siblings: ['WEB-1', 'WEB-3'],
      prerequisites: { delivery_rung_for_run: false, status_preflight_for_run: false, dependencies: [] },
    });
    // WEB-3 has no run-bound QA at all: that proves nothing; its prerequisite is read
    expect(web3).toMatchObject({
      item: 'WEB-3',
      requirement_ids: [],
      settlement: 'clear',
      blocked: false,
      prerequisites: { dependencies: [{ item: 'WEB-2', environment: null, status: 'open', satisfied: false }] },
    });
    expect(await snapshot()).toBe(before);

    // the whole closure in a fixed number of statements, whatever the member count
    const { memberClosure } = await import('../../activities/runs/memberClosure');
    const counted = (runId: string) => countStatements(t.url, (db) => memberClosure(db, runId));
    const one = await create({ items: ['API-1'], project: 'api', idempotencyKey: 'k-one' });
    // (issue 12: one more, the run's target environment, which a dependency closing with its dependent names)
    expect(await counted(run.run_id)).toBe(10);
    expect(await counted(one.run_id)).toBe(10);
  });
});

describe('the pinned flow (issue 10)', () => {
  const deployTo = (url: string) => ({
    http: { method: 'POST', url: `${url}/deploy?sha={{candidate}}`, expect_status: 200 },
  });
  /** web's definition with the release flow's stages replaced. */
  const withReleaseStages = (stages: object[]) => {
    const def = releaseDefinition({
      project: 'web',
      prefix: 'WEB',
      stageUrl: 'http://stage.example.test',
      prodUrl: 'https://web.example.test',
    });
    return { ...def, flows: def.flows.map((f) => (f.name === 'release' ? { ...f, stages } : f)) };
  };
  const apply = (def: object) =>
    projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(def) });

  test('Q4 Q5 issue 10: after execute, an apply that renames the item QA stage and removes the run QA and approval stages changes no answer of qa-pending (held), advance, qa begin, qa add or validate', async () => {
    await apply(
      withReleaseStages([
        { name: 'deploy-stage', kind: 'deploy', target: 'stage', action: deployTo('http://stage.example.test') },
        { name: 'item-qa', kind: 'qa', target: 'stage', scope: 'item', checks: [{ name: 'accept', plan: 'PLAN-7' }] },
        { name: 'stage-qa', kind: 'qa', target: 'stage', scope: 'run', checks: [{ name: 'smoke-test' }] },
        { name: 'signoff', kind: 'approval', target: 'production' },
        {
          name: 'deploy-production',
          kind: 'deploy',
          target: 'production',
          action: deployTo('https://web.example.test'),
        },
      ]),
    );
    const run = await create({ items: ['WEB-1'] });
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    for (const ordinal of [0, 1, 2, 3]) await stageStep(run.run_id, ordinal);
    const read = (stage?: string) => readQaPending(t.db, { runId: run.run_id, stage }, 10_000);
    const before = {
      pending: await read(),
      item: await read('item-qa'),
      hold: await r.blockingQaHold({ runId: run.run_id }),
      validate: await r.validateRun({ runId: run.run_id }),
    };
    // held before its completing stage, with the member at the item stage and the run check at the run stage
    expect(before.pending).toMatchObject({ held: true, completing_stage: 'deploy-production' });
    expect(before.pending.members.map((m) => [m.item, m.stage_name])).toEqual([['WEB-1', 'item-qa']]);
    expect(before.pending.run_obligations).toContainEqual({
      check_name: 'smoke-test',
      stage_name: 'stage-qa',
      status: 'pending',
    });

    await apply(
      withReleaseStages([
        { name: 'deploy-stage', kind: 'deploy', target: 'stage', action: deployTo('http://stage.example.test') },
        {
          name: 'item-check',
          kind: 'qa',
          target: 'production',
          scope: 'item',
          checks: [{ name: 'accept', plan: 'PLAN-7' }],
        },
        {
          name: 'deploy-production',
          kind: 'deploy',
          target: 'production',
          action: deployTo('https://web.example.test'),
        },
      ]),
    );
    // qa-pending, watch and advance read this report: the same answers, still held
    expect(await read()).toEqual(before.pending);
    expect(await read('item-qa')).toEqual(before.item);
    expect((await refusalOf(read('item-check'))).code).toBe('qa_stage_not_found');
    expect(await r.blockingQaHold({ runId: run.run_id })).toEqual(before.hold);
    expect(await r.validateRun({ runId: run.run_id })).toEqual(before.validate);
    // qa add: the pinned stages are the run's QA stages
    const obligations = runObligationActivities({ db: t.db, driverFreshMs: 60_000 });
    await expect(
      obligations.addRunQa({ sessionId: 'd1', runId: run.run_id, check: 'late', stage: 'stage-qa', blocking: true }),
    ).resolves.toMatchObject({ stage_name: 'stage-qa' });
    const unknown = await refusalOf(
      obligations.addRunQa({ sessionId: 'd1', runId: run.run_id, check: 'other', stage: 'item-check', blocking: true }),
    );
    expect(unknown).toMatchObject({ code: 'qa_stage_not_found', details: { stage: 'item-check' } });
    // qa begin: likewise
    const qa = qaExecutionActivities({ db: t.db, driverFreshMs: 60_000 });
    const notPinned = await refusalOf(
      qa.beginExecution({ sessionId: 'd1', runId: run.run_id, stage: 'item-check', plan: 'PLAN-7', item: 'WEB-1' }),
    );
    expect(notPinned.code).toBe('qa_stage_not_found');
    await expect(
      qa.beginExecution({ sessionId: 'd1', runId: run.run_id, stage: 'item-qa', plan: 'PLAN-7', item: 'WEB-1' }),
    ).resolves.toMatchObject({ stage: 'item-qa', item: 'WEB-1' });
  });

  test('Q5 issue 10: 0026 reads the pinned stages in deployment_qa_stage_outstanding (a renamed item stage keeps its members) and migrates down to the live-flow reader', async () => {
    const stages = (item: string) =>
      withReleaseStages([
        { name: 'deploy-stage', kind: 'deploy', target: 'stage', action: deployTo('http://stage.example.test') },
        { name: item, kind: 'qa', target: 'stage', scope: 'item', checks: [] },
      ]);
    await apply(stages('item-qa'));
    const run = await create({ items: ['WEB-1'] });
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    const outstanding = async () =>
      (
        await sql<{ subject_kind: string; subject: string; stage_name: string }>`
          SELECT subject_kind, subject, stage_name FROM deployment_qa_stage_outstanding(${run.run_id}, NULL)`.execute(
          t.db,
        )
      ).rows;
    const before = await outstanding();
    expect(before).toEqual([{ subject_kind: 'member', subject: 'WEB-1', stage_name: 'item-qa' }]);
    await apply(stages('item-check')); // the live flow's item stage renamed
    expect(await outstanding()).toEqual(before);
    await qaReaderPinnedFlow.down(t.db);
    try {
      // the previous reader read the live flow: the member's roll-ups became run obligations
      expect((await outstanding()).map((o) => o.subject_kind)).not.toContain('member');
    } finally {
      await qaReaderPinnedFlow.up(t.db);
    }
    expect(await outstanding()).toEqual(before);
  });

  test('O2 Q4 a holder held by blocking QA before its completing QA stage is named held, naming the QA, not deploying the stage it passed', async () => {
    await apply(
      withReleaseStages([
        { name: 'deploy-stage', kind: 'deploy', target: 'stage', action: deployTo('http://stage.example.test') },
        { name: 'stage-qa', kind: 'qa', target: 'stage', scope: 'run', checks: [{ name: 'smoke-test' }] },
      ]),
    );
    const held = await create({ items: [] });
    await r.executeRun({ sessionId: 'd1', runId: held.run_id });
    await stageStep(held.run_id, 0); // deployed; the workflow holds before stage-qa (Q4)
    const other = await create({ idempotencyKey: 'k-held', items: [] });
    const refused = await refusalOf(r.executeRun({ sessionId: 'd2', runId: other.run_id }));
    expect(refused.code).toBe('target_occupied');
    expect(refused.details).toMatchObject({
      holder: { open_lines: ['held by blocking QA before stage stage-qa: smoke-test'] },
    });
  });
});

describe('occupancy, drivers and lifecycle', () => {
  test('O1 O2 O3 environments resolving to one origin are one unit: a second start is refused target_occupied with every detail', async () => {
    const web = await create();
    await r.executeRun({ sessionId: 'd1', runId: web.run_id });
    await r.beginStage({ runId: web.run_id, ordinal: 0, walk: 1 });
    const api = await create({ project: 'api', items: ['API-1'], idempotencyKey: 'api' });
    const refused = await refusalOf(r.executeRun({ sessionId: 'd2', runId: api.run_id }));
    expect(refused.code).toBe('target_occupied');
    expect(refused.details).toEqual({
      origin: 'http://stage.example.test',
      holder: {
        run_id: web.run_id,
        project: 'web',
        stage: 'deploy-stage',
        open_lines: ['deploying: stage deploy-stage'],
      },
    });
    expect(refused.message).toContain(`occupied by run ${web.run_id} (project web, stage deploy-stage)`);
    expect(refused.recovery).toContain(
      `yoke deployment-runs terminalize ${web.run_id} --disposition cancelled --reason R`,
    );
    expect((await r.getRun({ runId: api.run_id })).status).toBe('created');
  });

  test('O1 the run holds its origins until its QA stages settle, then frees them; open lines name the QA still owed', async () => {
    const web = await create();
    await r.executeRun({ sessionId: 'd1', runId: web.run_id });
    await stageStep(web.run_id, 0);
    await r.beginStage({ runId: web.run_id, ordinal: 1, walk: 1 });
    const other = await create({ idempotencyKey: 'k2', items: [] });
    const refused = await refusalOf(r.executeRun({ sessionId: 'd2', runId: other.run_id }));
    expect((refused.details.holder as { open_lines: string[] }).open_lines).toEqual([
      'qa: stage stage-qa awaits WEB-1/checkout-e2e, smoke-test',
    ]);
    await r.recordQaVerdict({ sessionId: 'd1', runId: web.run_id, checkName: 'smoke-test', status: 'passed' });
    await r.recordQaVerdict({ sessionId: 'd1', runId: web.run_id, checkName: 'WEB-1/checkout-e2e', status: 'waived' });
    await r.finishStage({ runId: web.run_id, ordinal: 1, walk: 1, result: { ok: true, detail: 'qa settled' } });
    // still executing (approval and production deploy ahead), but no longer occupying
    expect((await r.getRun({ runId: web.run_id })).occupancy).toMatchObject({ occupying: false });
    await expect(r.executeRun({ sessionId: 'd2', runId: other.run_id })).resolves.toMatchObject({
      status: 'executing',
    });
  });

  test('O1 a flow without QA stages holds its origins until terminal', async () => {
    const hotfix = await create({ flow: 'hotfix', idempotencyKey: 'hf', items: [] });
    await r.executeRun({ sessionId: 'd1', runId: hotfix.run_id });
    await stageStep(hotfix.run_id, 0);
    const next = await create({ flow: 'hotfix', idempotencyKey: 'hf2', items: [] });
    expect((await refusalOf(r.executeRun({ sessionId: 'd1', runId: next.run_id }))).code).toBe('target_occupied');
    await r.settleNow({ runId: hotfix.run_id });
    await expect(r.executeRun({ sessionId: 'd1', runId: next.run_id })).resolves.toMatchObject({ status: 'executing' });
  });

  test('O3 a preview without url occupies its own slug; production is occupied like stage', async () => {
    const a1 = await create({ flow: 'preview-a', target: 'preview-a', idempotencyKey: 'a1', items: [] });
    const a2 = await create({ flow: 'preview-a', target: 'preview-a', idempotencyKey: 'a2', items: [] });
    const b = await create({ flow: 'preview-b', target: 'preview-b', idempotencyKey: 'b', items: [] });
    expect((await r.executeRun({ sessionId: 'd1', runId: a1.run_id })).occupancy_units).toEqual(['preview:web/pr-a']);
    expect((await refusalOf(r.executeRun({ sessionId: 'd1', runId: a2.run_id }))).details.origin).toBe(
      'preview:web/pr-a',
    );
    await expect(r.executeRun({ sessionId: 'd1', runId: b.run_id })).resolves.toMatchObject({ status: 'executing' });
    const release = await create({ target: 'production', idempotencyKey: 'prod', items: [] });
    expect((await r.executeRun({ sessionId: 'd1', runId: release.run_id })).occupancy_units).toEqual([
      'http://stage.example.test',
      'https://web.example.test',
    ]);
  });

  test('O2 a holder past its last stage (a flow without QA keeps its origins until it is terminal) is named settling, not deploying a stage it finished', async () => {
    const first = await create({ flow: 'preview-a', target: 'preview-a', idempotencyKey: 's1', items: [] });
    const second = await create({ flow: 'preview-a', target: 'preview-a', idempotencyKey: 's2', items: [] });
    await r.executeRun({ sessionId: 'd1', runId: first.run_id });
    await stageStep(first.run_id, 0);
    const refused = await refusalOf(r.executeRun({ sessionId: 'd1', runId: second.run_id }));
    expect(refused.code).toBe('target_occupied');
    expect(refused.message).toContain(
      `occupied by run ${first.run_id} (project web, stage go): settling: every stage passed`,
    );
    expect(refused.details).toMatchObject({ holder: { open_lines: ['settling: every stage passed'] } });
  });

  test('O2 race: two runs on environments sharing one origin started at the same instant: exactly one executes; the other is told the holder and its stage', async () => {
    const web = await create();
    const api = await create({ project: 'api', items: ['API-1'], idempotencyKey: 'api' });
    const [a, b] = [deploymentRunActivities({ db: t.connect(1) }), deploymentRunActivities({ db: t.connect(1) })];
    const outcomes = await Promise.allSettled([
      a.executeRun({ sessionId: 'd1', runId: web.run_id }),
      b.executeRun({ sessionId: 'd2', runId: api.run_id }),
    ]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    const loser = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected')!.reason as YokeError;
    expect(loser.code).toBe('target_occupied');
    expect(loser.details).toMatchObject({
      origin: 'http://stage.example.test',
      holder: { open_lines: [expect.stringMatching(/^deploying: stage /)] },
    });
    // the winner's workflow has not begun a stage: the holder is named at its cursor's stage, as its line says
    const holder = (loser.details as { holder: { stage: string | null; open_lines: string[] } }).holder;
    expect(holder.stage).toBe('deploy-stage');
    expect(holder.open_lines).toEqual([`deploying: stage ${holder.stage}`]);
    expect(loser.message).toContain('stage deploy-stage)');
  });

  test('O1 O2 issue 16: execute is two statements; the check reads live occupancy only, and a retried run occupies again', async () => {
    // Every occupancy row of a run that occupies is live; the others are not.
    const liveness = async () =>
      (
        await sql<{ run_id: string; live: boolean; occupies: boolean }>`
          SELECT o.run_id, o.live, yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at) AS occupies
            FROM deployment_run_occupancy o JOIN deployment_runs r ON r.run_id = o.run_id`.execute(t.db)
      ).rows.filter((row) => row.live !== row.occupies);
    const counter = counting();
    const counted = deploymentRunActivities({ db: t.db.withPlugin(counter), driverFreshMs: 60_000 });
    const first = await create({ flow: 'hotfix', idempotencyKey: 'hf1', items: [] });
    await counted.executeRun({ sessionId: 'd1', runId: first.run_id });
    expect(counter.count).toBe(2);
    expect(await liveness()).toEqual([]);
    // the flow is pinned with the URLs of the environments the run targets
    const pinned = await t.db
      .selectFrom('deployment_runs')
      .select('pinned_flow')
      .where('run_id', '=', first.run_id)
      .executeTakeFirstOrThrow();
    const hotfix = await t.db
      .selectFrom('flows as f')
      .innerJoin('projects as p', 'p.project_id', 'f.project_id')
      .select('f.stages')
      .where('p.name', '=', 'web')
      .where('f.name', '=', 'hotfix')
      .executeTakeFirstOrThrow();
    expect(pinned.pinned_flow).toEqual({
      stages: hotfix.stages,
      environment_urls: { stage: 'http://stage.example.test' },
    });
    await r.terminalizeRun({ sessionId: 'd1', runId: first.run_id, disposition: 'failed', reason: 'broke' });
    expect(await liveness()).toEqual([]);
    // a history of runs on the origin, each released
    for (const key of ['hf2', 'hf3']) {
      const run = await create({ flow: 'hotfix', idempotencyKey: key, items: [] });
      await r.executeRun({ sessionId: 'd2', runId: run.run_id });
      await r.terminalizeRun({ sessionId: 'd2', runId: run.run_id, disposition: 'cancelled', reason: 'done' });
    }
    expect(await liveness()).toEqual([]);
    const live = () => t.db.selectFrom('deployment_run_occupancy').select('run_id').where('live', '=', true).execute();
    expect(await live()).toEqual([]);
    // the failed run retried occupies its origin again, and the next start is refused naming it
    const { walk } = await r.retryRun({ sessionId: 'd1', runId: first.run_id });
    expect(await live()).toEqual([{ run_id: first.run_id }]);
    expect(await liveness()).toEqual([]);
    const next = await create({ flow: 'hotfix', idempotencyKey: 'hf4', items: [] });
    const refused = await refusalOf(r.executeRun({ sessionId: 'd2', runId: next.run_id }));
    expect(refused.code).toBe('target_occupied');
    expect(refused.details.holder).toMatchObject({ run_id: first.run_id });
    // the check starts from the partial index over live rows, not from the runs (whose number
    // grows with every origin's history), and reads each holder's run by its key
    const units = (
      await t.db.selectFrom('deployment_run_occupancy').select('unit').where('run_id', '=', first.run_id).execute()
    ).map((o) => o.unit);
    const firstScans = await occupancyCheckScans(t.url, units);
    expect(firstScans[0]).toBe('deployment_run_occupancy_live');
    expect(firstScans).not.toContain('deployment_runs');
    // a settled release frees the origin while the run still executes
    await r.beginStage({ runId: first.run_id, ordinal: 0, walk });
    await r.finishStage({ runId: first.run_id, ordinal: 0, walk, result: { ok: true, detail: 'test' } });
    await r.settleNow({ runId: first.run_id });
    expect(await live()).toEqual([]);
    expect(await liveness()).toEqual([]);
    await expect(r.executeRun({ sessionId: 'd2', runId: next.run_id })).resolves.toMatchObject({ status: 'executing' });
    expect(await liveness()).toEqual([]);
  });

  test('O4 failure retracts unsettled run requirements in the status transaction; retry restores them; cancelled runs cannot restart', async () => {
    const run = await create({ items: ['WEB-1', 'WEB-2'] });
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'smoke-test', status: 'passed' });
    await r.removeItem({ sessionId: 'd1', runId: run.run_id, item: 'WEB-2', reason: 'not ready' }); // a manual retraction
    const failed = await r.terminalizeRun({
      sessionId: 'd1',
      runId: run.run_id,
      disposition: 'failed',
      reason: 'stage smoke broke',
    });
    expect(failed).toMatchObject({ run_id: run.run_id, status: 'failed', retracted: ['WEB-1/checkout-e2e'] });
    const qa = async () =>
      Object.fromEntries(
        (
          await t.db
            .selectFrom('deployment_run_qa')
            .select(['check_name', 'status', 'retraction'])
            .where('run_id', '=', run.run_id)
            .execute()
        ).map((q) => [q.check_name, `${q.status}/${q.retraction}`]),
      );
    expect(await qa()).toEqual({
      'WEB-1/checkout-e2e': 'pending/automatic',
      'WEB-2/gift-smoke': 'pending/manual',
      'smoke-test': 'passed/null',
    });
    await r.retryRun({ sessionId: 'd1', runId: run.run_id });
    expect(await qa()).toEqual({
      'WEB-1/checkout-e2e': 'pending/null',
      'WEB-2/gift-smoke': 'pending/manual',
      'smoke-test': 'passed/null',
    });
    expect((await r.getRun({ runId: run.run_id })).status).toBe('executing');
    await r.terminalizeRun({ sessionId: 'd1', runId: run.run_id, disposition: 'cancelled', reason: 'abandoned' });
    expect((await refusalOf(r.retryRun({ sessionId: 'd1', runId: run.run_id }))).code).toBe('run_cancelled');
    expect((await refusalOf(r.executeRun({ sessionId: 'd1', runId: run.run_id }))).code).toBe('run_cancelled');
  });

  test('R1 the executing session drives; other sessions are refused run_driven_elsewhere until the heartbeat lapses', async () => {
    const run = await create({ items: ['WEB-1'] });
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    for (const call of [
      () => r.addItem({ sessionId: 'd2', runId: run.run_id, item: 'WEB-2', requirementIds: [], planIds: [] }),
      () => r.removeItem({ sessionId: 'd2', runId: run.run_id, item: 'WEB-1', reason: 'x' }),
      () => r.executeRun({ sessionId: 'd2', runId: run.run_id }),
      () => r.terminalizeRun({ sessionId: 'd2', runId: run.run_id, disposition: 'cancelled', reason: 'x' }),
      () => r.heartbeatRun({ sessionId: 'd2', runId: run.run_id }),
    ]) {
      const refused = await refusalOf(call());
      expect(refused.code).toBe('run_driven_elsewhere');
      expect(refused.details).toMatchObject({ driver_session_id: 'd1' });
    }
    await expect(r.heartbeatRun({ sessionId: 'd1', runId: run.run_id })).resolves.toMatchObject({
      driver_session_id: 'd1',
      took_over: false,
    });
    // a lapsed attachment frees the run by itself
    await t.db
      .updateTable('deployment_runs')
      .set({ driver_heartbeat_at: sql`now() - interval '11 minutes'` })
      .where('run_id', '=', run.run_id)
      .execute();
    expect((await r.getRun({ runId: run.run_id })).driver).toMatchObject({ session_id: 'd1', live: false });
    await expect(
      r.addItem({ sessionId: 'd2', runId: run.run_id, item: 'WEB-2', requirementIds: [], planIds: [] }),
    ).resolves.toMatchObject({ item: 'WEB-2' });
    await expect(r.heartbeatRun({ sessionId: 'd2', runId: run.run_id })).resolves.toMatchObject({
      driver_session_id: 'd2',
      took_over: true,
    });
  });

  test('O1 R1 a repeated execute resumes: resumed true, the same walk, and the carried work recorded at the first freeze', async () => {
    const run = await create({ items: ['WEB-1'] });
    const first = await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    const again = await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    expect(first.resumed).toBe(false);
    expect(again).toMatchObject({ resumed: true, walk: first.walk, carried_work: { recorded: true } });
    expect(again.carried_work!.items).toEqual(first.carried_work!.items);
  });

  test('R1 the session that executes becomes the driver: a heartbeat of a created run nobody drives is refused run_not_executing and attaches nobody', async () => {
    const run = await create({ items: ['WEB-1'] });
    const refused = await refusalOf(r.heartbeatRun({ sessionId: 'd2', runId: run.run_id }));
    expect(refused.code).toBe('run_not_executing');
    expect(refused.recovery).toContain(`yoke deployment-runs execute ${run.run_id}`);
    expect((await r.getRun({ runId: run.run_id })).driver).toBeNull();
    await expect(r.executeRun({ sessionId: 'd1', runId: run.run_id })).resolves.toBeDefined();
  });

  test('R1 issue 4/11: a run-level QA verdict (passed, failed or waived) from a session that neither drives the run nor holds a seat is refused run_driven_elsewhere and changes nothing', async () => {
    const run = await create({ items: ['WEB-1'] });
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    for (const status of ['passed', 'failed', 'waived'] as const) {
      const refused = await refusalOf(
        r.recordQaVerdict({ sessionId: 'd2', runId: run.run_id, checkName: 'smoke-test', status }),
      );
      expect(refused).toMatchObject({ code: 'run_driven_elsewhere', details: { driver_session_id: 'd1' } });
    }
    const check = () =>
      t.db
        .selectFrom('deployment_run_qa')
        .select('status')
        .where('run_id', '=', run.run_id)
        .where('check_name', '=', 'smoke-test')
        .executeTakeFirstOrThrow();
    expect(await check()).toEqual({ status: 'pending' });
    expect((await r.getRun({ runId: run.run_id })).status).toBe('executing');
    // the driver records it
    await expect(
      r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName: 'smoke-test', status: 'failed' }),
    ).resolves.toMatchObject({ status: 'failed' });
  });

  test('R1 ending the driver session detaches it at once; the refusal says so', async () => {
    const run = await create({ items: ['WEB-1'] });
    await r.executeRun({ sessionId: 'd1', runId: run.run_id });
    const refused = await refusalOf(r.heartbeatRun({ sessionId: 'd2', runId: run.run_id }));
    expect(refused.code).toBe('run_driven_elsewhere');
    expect(refused.recovery).toContain('yoke sessions end --session d1');
    await sessionActivities({ db: t.db }).endSession({ sessionId: 'd1' });
    expect((await r.getRun({ runId: run.run_id })).driver).toMatchObject({ session_id: 'd1', live: false });
    await expect(r.heartbeatRun({ sessionId: 'd2', runId: run.run_id })).resolves.toMatchObject({
      driver_session_id: 'd2',
      took_over: true,
    });
  });
});

/**
 * The scans of the occupancy check inside `yoke_lock_origins`, outermost first (the index each
 * uses, or the table a sequential scan reads), from the plan auto_explain reports for the nested
 * statement.
 */
async function occupancyCheckScans(url: string, units: string[]): Promise<string[]> {
  const c = new Client({ connectionString: url });
  await c.connect();
  const plans: string[] = [];
  c.on('notice', (n) => plans.push(n.message ?? ''));
  try {
    await c.query(`LOAD 'auto_explain'`);
    await c.query('SET auto_explain.log_min_duration = 0');
    await c.query('SET auto_explain.log_nested_statements = on');
    await c.query('SET auto_explain.log_level = notice');
    await c.query('BEGIN');
    await c.query('SELECT * FROM yoke_lock_origins($1, $2)', ['no-such-run', units]);
    await c.query('ROLLBACK');
  } finally {
    await c.end();
  }
  const plan = plans.find((p) => p.includes('FROM deployment_run_occupancy o'));
  if (!plan) throw new Error(`no plan of the occupancy check among ${plans.length} notices`);
  return [...plan.matchAll(/Scan (?:using (\S+) )?on (\S+)/g)].map((m) => m[1] ?? m[2]!);
}
