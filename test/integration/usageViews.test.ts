import { join } from 'node:path';
import { sessionActivities } from '../../activities/sessions';
import { sessionUsageActivities } from '../../activities/usage/sessionUsage';
import { REPORT_KEYS, usageViewActivities } from '../../activities/usage/usageViews';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { countStatements } from '../helpers/statements';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  const s = sessionActivities({ db: t.db });
  const u = sessionUsageActivities({ db: t.db });
  const dir = fixtureDir();
  for (const [id, model] of [
    ['v1', 'claude-haiku-4-5-20251001'],
    ['v2', 'claude-opus-4-6'],
    ['v3', 'claude-haiku-4-5-20251001'],
  ] as const) {
    await s.registerSession({ sessionId: id, actorId: 'viewer', harness: 'claude', machine: `m-${id}` });
    const path = join(dir, `${id}.jsonl`);
    writeLines(path, [claudeAssistant(`${id}-1`, { input: 1_000, output: 100 }, { model })]);
    await u.foldSessionUsage({ sessionId: id, harness: 'claude', artifacts: [path] });
  }
});
afterAll(async () => {
  await t.drop();
});

const statementsOf = (read: (v: ReturnType<typeof usageViewActivities>) => Promise<unknown>) =>
  countStatements(t.url, (db) => read(usageViewActivities({ db })));

test.each(REPORT_KEYS)('usage report --by %s is one statement, with or without a viewing session (U13)', async (by) => {
  expect(await statementsOf((v) => v.usageReport({ by }))).toBe(1);
  expect(await statementsOf((v) => v.usageReport({ by, viewer: { sessionId: 'v1' } }))).toBe(1);
});

test('usage report --by model sums sessions per model and prices each at its start', async () => {
  const report = await usageViewActivities({ db: t.db }).usageReport({ by: 'model' });
  expect(report.rows.map((r) => [r.key, r.sessions, r.total_tokens, r.cost_status])).toEqual([
    ['claude-haiku-4-5-20251001', 2, 2_200, 'priced'],
    ['claude-opus-4-6', 1, 1_100, 'priced'],
  ]);
  // Haiku 4.5 at $1 / $5 per MTok, Opus 4.6 at $5 / $25
  expect(report.rows.map((r) => r.cost_usd)).toEqual([0.003, 0.0075]);
  expect(report.totals).toMatchObject({ key: 'total', sessions: 3, total_tokens: 3_300, cost_usd: 0.0105 });
});

test('sessions show is one statement', async () => {
  expect(await statementsOf((v) => v.showSession({ sessionId: 'v2' }))).toBe(1);
});

test('U12 usage report names what has no price: a partial or unavailable cost carries its gap in cost_caveat, as sessions show does', async () => {
  const path = join(fixtureDir(), 'v4.jsonl');
  writeLines(path, [claudeAssistant('v4-1', { input: 10, output: 1 }, { model: 'claude-made-up-9' })]);
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'v4', actorId: 'viewer', harness: 'claude' });
  await sessionUsageActivities({ db: t.db }).foldSessionUsage({
    sessionId: 'v4',
    harness: 'claude',
    artifacts: [path],
  });
  const report = await usageViewActivities({ db: t.db }).usageReport({ by: 'session' });
  const row = report.rows.find((r) => r.key === 'v4')!;
  expect(row.cost_status).toBe('unavailable');
  expect(row.cost_caveat).toContain('model claude-made-up-9 has no price in revision');
  expect(report.totals.cost_status).toBe('partial');
  expect(report.totals.cost_caveat).toContain('claude-made-up-9');
  expect(report.rows.find((r) => r.key === 'v1')!.cost_caveat).toBeNull();
});
