import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { claimActivities } from '../../activities/claims';
import { YokeError } from '../../domain/errors';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { seedLab, services } from '../helpers/fixtures';

const RACERS = 20;
let t: TestDatabase;

beforeEach(async () => {
  t = await createTestDatabase();
  const s = services(t.db);
  await seedLab(s);
  for (let i = 0; i < RACERS; i++)
    await s.registerSession({ sessionId: `racer-${i}`, actorId: `agent-${i}`, project: 'web' });
});
afterEach(async () => {
  await t.drop();
});

/**
 * Each racer has its own pool (its own connection), so the database, not the event loop,
 * orders them. Exactly one wins; every loser gets the claim_held refusal.
 */
async function race(acquire: (db: Kysely<Database>, i: number) => Promise<unknown>) {
  const pools = Array.from({ length: RACERS }, () => t.connect(1));
  await Promise.all(pools.map((p) => p.selectFrom('projects').select('project_id').execute())); // open every connection first
  const outcomes = await Promise.allSettled(pools.map((db, i) => acquire(db, i)));
  const winners = outcomes.filter((o) => o.status === 'fulfilled');
  const losers = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected');
  return { winners, codes: losers.map((l) => (l.reason instanceof YokeError ? l.reason.code : String(l.reason))) };
}

async function liveCount(key: string): Promise<number> {
  const rows = await t.db
    .selectFrom('work_claims')
    .select('claim_id')
    .where('key', '=', key)
    .where('released_at', 'is', null)
    .execute();
  return rows.length;
}

test('C3 race: 20 concurrent acquirers of one QA_HOST key, exactly one wins', async () => {
  const { winners, codes } = await race((db, i) =>
    claimActivities({ db }).acquireCoordinationClaim({ sessionId: `racer-${i}`, key: 'QA_HOST:lab-1' }),
  );
  expect(winners).toHaveLength(1);
  expect(codes).toEqual(Array(RACERS - 1).fill('claim_held'));
  expect(await liveCount('QA_HOST:lab-1')).toBe(1);
});

test('C3 race: 20 items of one project race for one migration model, exactly one wins', async () => {
  const { winners, codes } = await race((db, i) =>
    claimActivities({ db }).acquireCoordinationClaim({
      sessionId: `racer-${i}`,
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: `WEB-${i + 1}`,
    }),
  );
  expect(winners).toHaveLength(1);
  expect(codes).toEqual(Array(RACERS - 1).fill('claim_held'));
  expect(await liveCount('LIVE_DB_MIGRATION:orders')).toBe(1);
});

test('C3 race: 20 concurrent acquirers of one route qualification grant, exactly one wins', async () => {
  const { winners, codes } = await race((db, i) =>
    claimActivities({ db }).acquireCoordinationClaim({
      sessionId: `racer-${i}`,
      key: 'ROUTE_QUALIFICATION:beta',
      project: 'web',
    }),
  );
  expect(winners).toHaveLength(1);
  expect(codes).toEqual(Array(RACERS - 1).fill('claim_held'));
  expect(await liveCount('ROUTE_QUALIFICATION:beta')).toBe(1);
});
