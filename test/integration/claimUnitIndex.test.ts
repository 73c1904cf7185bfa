import { sql } from 'kysely';
import { claimActivities } from '../../activities/claims';
import type { ClaimScope } from '../../db/database';
import * as claimUnitIndex from '../../db/migrations/0054_claim_unit_index';
import type { TargetKind } from '../../domain/claimKinds';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, seedLab, services } from '../helpers/fixtures';

let t: TestDatabase;
let web: number;
let api: number;
let items: [number, number];

beforeAll(async () => {
  t = await createTestDatabase();
  await seedLab(services(t.db));
  const projects = await t.db.selectFrom('projects').select(['project_id', 'name']).execute();
  web = projects.find((p) => p.name === 'web')!.project_id;
  api = projects.find((p) => p.name === 'api')!.project_id;
  const rows = await t.db
    .insertInto('backlog_items')
    .values([
      { project_id: web, number: 901 },
      { project_id: web, number: 902 },
    ])
    .returning('item_id')
    .execute();
  items = [rows[0]!.item_id, rows[1]!.item_id];
}, 120_000);
afterAll(async () => t.drop());

interface Unit {
  scope: ClaimScope;
  key?: string;
  project_id?: number;
  item_id?: number;
}

/** Each kind sharing the index: one unit, and units differing from it in one column each. */
const kinds = (): [TargetKind, Unit, Unit[]][] => [
  [
    'migration_serialization',
    { scope: { project_id: web, model: 'orders' }, project_id: web },
    [
      { scope: { project_id: web, model: 'users' }, project_id: web },
      { scope: { project_id: api, model: 'orders' }, project_id: api },
    ],
  ],
  [
    'route_qualification',
    { scope: { project_id: web, grant_key: 'beta' }, project_id: web },
    [
      { scope: { project_id: web, grant_key: 'gamma' }, project_id: web },
      { scope: { project_id: api, grant_key: 'beta' }, project_id: api },
    ],
  ],
  ['item', { scope: {}, item_id: items[0] }, [{ scope: {}, item_id: items[1] }]],
  ['steering', { scope: {}, project_id: web }, [{ scope: {}, project_id: api }]],
  ['deploy_serialization', { scope: {}, key: 'DEPLOY:web' }, [{ scope: {}, key: 'DEPLOY:api' }]],
  [
    'epic_task',
    { scope: { task: 'spec' }, item_id: items[0] },
    [
      { scope: { task: 'tests' }, item_id: items[0] },
      { scope: { task: 'spec' }, item_id: items[1] },
    ],
  ],
  ...(
    [
      ['process', 'process_key'],
      ['path_claim', 'path'],
      ['strategy_doc_claim', 'document'],
    ] as const
  ).map(([kind, field]): [TargetKind, Unit, Unit[]] => [
    kind,
    { scope: { project_id: web, [field]: 'a:b' }, project_id: web },
    [
      { scope: { project_id: web, [field]: 'a:c' }, project_id: web },
      { scope: { project_id: api, [field]: 'a:b' }, project_id: api },
    ],
  ]),
];

const insert = (kind: TargetKind, u: Unit) =>
  t.db
    .insertInto('work_claims')
    .values({
      target_kind: kind,
      scope: JSON.stringify(u.scope),
      key: u.key ?? null,
      project_id: u.project_id ?? null,
      item_id: u.item_id ?? null,
      session_id: 'w1',
    })
    .returning('claim_id')
    .executeTakeFirstOrThrow();

const releaseAll = () =>
  t.db
    .updateTable('work_claims')
    .set({ released_at: sql`now()`, release_reason: 'test' })
    .where('released_at', 'is', null)
    .execute();

test('C3 issue 16 0054: the nine kinds other than a test machine share work_claims_live_unit: a second live claim of one unit is refused on it, a unit differing in any one column is not, and a release frees the unit', async () => {
  await releaseAll(); // seedLab's steering seat
  for (const [kind, unit, others] of kinds()) {
    const first = await insert(kind, unit);
    await expect(insert(kind, unit)).rejects.toMatchObject({ code: '23505', constraint: 'work_claims_live_unit' });
    for (const other of others) await insert(kind, other);
    await t.db
      .updateTable('work_claims')
      .set({ released_at: sql`now()`, release_reason: 'test' })
      .where('claim_id', '=', first.claim_id)
      .execute();
    await insert(kind, unit);
  }
  await releaseAll();
});

test('C3 issue 16 0054: a holder is still found through the shared index (claim_held names it), and 0054 migrates down to one index per kind and back', async () => {
  const claims = claimActivities({ db: t.db });
  const take = (sessionId: string) =>
    claims.acquireCoordinationClaim({ sessionId, key: 'ROUTE_QUALIFICATION:beta-route', project: 'web' });
  const held = await take('w1');
  const refused = await refusalOf(take('w2'));
  expect(refused.code).toBe('claim_held');
  expect(refused.details).toMatchObject({ holder: expect.objectContaining({ claim_id: held.claim.claim_id }) });

  await claimUnitIndex.down(t.db);
  try {
    await expect(
      insert('route_qualification', { scope: { project_id: web, grant_key: 'beta-route' }, project_id: web }),
    ).rejects.toMatchObject({ code: '23505', constraint: 'work_claims_live_route_qualification' });
  } finally {
    await claimUnitIndex.up(t.db);
  }
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_indexes WHERE tablename = 'work_claims' AND indexname LIKE 'work_claims_live_%'`.execute(
    t.db,
  );
  expect(rows[0]!.n).toBe(2); // the shared index and the test machines' own
  await claims.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
});
