import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { jsonError, yoke, yokeBin, type CliResult } from '../helpers/cli';
import { progressLine } from '../../cli/backfillProgress';
import { claudeAssistant, codexMeta, codexTokens, codexTurn, fixtureDir, writeLines } from '../helpers/usageFixtures';

let t: TestDatabase;
const run = (args: string[], env: Record<string, string> = {}) => yoke(t.url, args, env);
const lines = (r: CliResult) =>
  r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, any>);

beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);

afterAll(async () => {
  await t.drop();
});

test('usage backfill registers each Claude transcript not yet known (local actor, given machine, not a probe, ended as history) and folds them all, subagents included; JSON lines off a terminal', async () => {
  const config = fixtureDir();
  const project = join(config, 'projects', '-work-app');
  writeLines(join(project, 'sess-a.jsonl'), [
    { type: 'user', timestamp: '2026-11-20T08:00:00Z', message: { role: 'user', content: 'go' } },
    claudeAssistant('a1', { input: 100, output: 10 }),
    claudeAssistant('a1', { input: 100, output: 50 }), // a later streaming snapshot of the same call
  ]);
  writeLines(join(project, 'sess-a', 'subagents', 'agent-1.jsonl'), [claudeAssistant('a2', { input: 7, output: 3 })]);
  writeLines(join(project, 'sess-b.jsonl'), [claudeAssistant('b1', { input: 1000, output: 1 })]);
  // sess-b is already a session of someone else: it is folded, never registered again
  const pre = await run(['sessions', 'register', '--session', 'sess-b', '--actor', 'carol', '--harness', 'claude']);
  expect(pre.code).toBe(0);

  const r = await run(['usage', 'backfill', '--harness', 'claude', '--dir', config, '--machine', 'laptop-7']);
  expect(r.code).toBe(0);
  const out = lines(r);
  expect(out[0]).toMatchObject({ event: 'start', files_total: 2, files_done: 0 });
  const sessions = out.filter((l) => l.event === 'session');
  expect(sessions.map((s) => s.session_id).sort()).toEqual(['sess-a', 'sess-b']);
  expect(sessions.find((s) => s.session_id === 'sess-a')).toMatchObject({
    registered: true,
    status: 'measured',
    usage_tokens: 100 + 50 + 7 + 3,
  });
  expect(sessions.find((s) => s.session_id === 'sess-b')).toMatchObject({ registered: false, usage_tokens: 1001 });
  for (const s of sessions) expect(s.progress).toMatchObject({ files_total: 2 });
  const done = out[out.length - 1]!;
  expect(done).toMatchObject({ event: 'done', found: 2, registered: 1, folded: 2, failed: 0, usage_tokens: 1161 });
  expect(done.machine_id).toBe('laptop-7');

  const a = await t.db.selectFrom('sessions').selectAll().where('session_id', '=', 'sess-a').executeTakeFirstOrThrow();
  expect(a).toMatchObject({ actor_id: done.actor_id, machine_id: 'laptop-7', probe: false, harness: 'claude' });
  expect(a.offered_at.toISOString()).toBe('2026-11-20T08:00:00.000Z'); // priced at its own time (U12)
  expect(a.ended_at).not.toBeNull(); // history, never an open session in the 24-hour cohort
  const b = await t.db.selectFrom('sessions').selectAll().where('session_id', '=', 'sess-b').executeTakeFirstOrThrow();
  expect(b).toMatchObject({ actor_id: 'carol', machine_id: null, ended_at: null });

  // a second run reads nothing new and changes nothing (absolute totals, U9)
  const again = lines(await run(['usage', 'backfill', '--harness', 'claude', '--dir', config, '--json']));
  expect(again[again.length - 1]).toMatchObject({ found: 2, registered: 0, folded: 2, bytes: 0, usage_tokens: 1161 });
});

test('usage backfill --harness codex registers main rollouts only; child threads are summed into their parent', async () => {
  const sessions = join(fixtureDir(), '2026', '11', '29');
  const parentId = 'aaaaaaaa-1111-0000-0000-000000000001';
  const childId = 'bbbbbbbb-1111-0000-0000-000000000002';
  writeLines(join(sessions, `rollout-2026-11-29T10-00-00-${parentId}.jsonl`), [
    codexMeta(parentId, '2026-11-29T10:00:00Z'),
    codexTurn('gpt-5-codex'),
    codexTokens('2026-11-29T10:00:03Z', { input: 1000, cached: 400, output: 300, reasoning: 100 }),
    {
      timestamp: '2026-11-29T10:00:05Z',
      type: 'response_item',
      payload: { type: 'SubAgentActivity', thread_id: childId },
    },
  ]);
  writeLines(join(sessions, `rollout-2026-11-29T10-00-06-${childId}.jsonl`), [
    codexMeta(childId, '2026-11-29T10:00:06Z', true),
    codexMeta(parentId, '2026-11-29T10:00:00Z'),
    codexTokens('2026-11-29T10:00:03Z', { input: 1000, cached: 400, output: 300, reasoning: 100 }),
    codexTurn('gpt-5-codex', '2026-11-29T10:00:07Z'),
    codexTokens('2026-11-29T10:00:08Z', { input: 200, cached: 50, output: 80, reasoning: 30 }),
  ]);
  const r = await run(['usage', 'backfill', '--harness', 'codex', '--dir', join(sessions, '..', '..', '..'), '--json']);
  expect(r.code).toBe(0);
  const out = lines(r);
  expect(out.filter((l) => l.event === 'session').map((s) => s.session_id)).toEqual([parentId]);
  expect(out[out.length - 1]).toMatchObject({ found: 1, registered: 1, usage_tokens: 1000 + 300 + 200 + 80 });
  const row = await t.db
    .selectFrom('sessions')
    .selectAll()
    .where('session_id', '=', parentId)
    .executeTakeFirstOrThrow();
  expect(row.offered_at.toISOString()).toBe('2026-11-29T10:00:00.000Z');
});

test('usage backfill with a --dir that is not a directory exits 2 naming --dir and writes nothing', async () => {
  const before = await t.db
    .selectFrom('sessions')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  const r = await run(['usage', 'backfill', '--harness', 'claude', '--dir', '/nonexistent/yoke', '--json']);
  expect(r.code).toBe(2);
  expect(jsonError(r)).toMatchObject({ code: 'invalid_argument' });
  expect(jsonError(r).message).toContain('--dir');
  const bad = await run(['usage', 'backfill', '--harness', 'cursor', '--json']);
  expect(bad.code).toBe(2);
  expect(jsonError(bad).message).toContain('--harness');
  const after = await t.db
    .selectFrom('sessions')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  expect(after.n).toBe(before.n);
});

test('issue 9 issue 16: a transcript whose name cannot be a session id (over 200 characters) is named as failed and the others go on; nothing found is said, with where it looked', async () => {
  const config = fixtureDir();
  const project = join(config, 'projects', '-work-long');
  const long = 'b'.repeat(220);
  writeLines(join(project, `${long}.jsonl`), [claudeAssistant('l1', { input: 5, output: 5 })]);
  writeLines(join(project, 'ok-one.jsonl'), [claudeAssistant('o1', { input: 10, output: 2 })]);
  const r = await run(['usage', 'backfill', '--harness', 'claude', '--dir', config, '--json']);
  expect(r.code).toBe(0);
  const out = lines(r);
  expect(out[0]).toMatchObject({ event: 'start', files_total: 2 });
  const sessions = out.filter((l) => l.event === 'session');
  expect(sessions.find((s) => s.session_id === long)).toMatchObject({
    status: 'failed',
    registered: false,
    error: expect.stringContaining('at most 200 characters (220 given)'),
  });
  expect(sessions.find((s) => s.session_id === 'ok-one')).toMatchObject({ registered: true, usage_tokens: 12 });
  expect(out[out.length - 1]).toMatchObject({ event: 'done', found: 2, registered: 1, folded: 1, failed: 1 });

  const empty = fixtureDir();
  const none = await run(['usage', 'backfill', '--harness', 'codex', '--dir', empty, '--json']);
  expect(none.code).toBe(0);
  const done = lines(none).pop()!;
  expect(done).toMatchObject({ event: 'done', found: 0 });
  expect(done.warnings).toEqual([expect.stringContaining('no codex transcripts under')]);
  expect(done.warnings[0]).toContain('pass --dir D');
  expect((await run(['usage', 'backfill', '--harness', 'codex', '--dir', empty])).stderr).toContain(
    'warning: no codex transcripts under',
  );
});

test('usage backfill draws a progress bar (files, MB, tokens, elapsed, ETA) on a terminal', async () => {
  const config = fixtureDir();
  writeLines(join(config, 'projects', 'p', 'sess-tty.jsonl'), [claudeAssistant('t1', { input: 5, output: 5 })]);
  // `script` gives the command a pseudo-terminal, as a user's shell would
  const command = [process.execPath, yokeBin, 'usage', 'backfill', '--harness', 'claude', '--dir', config]
    .map((a) => `'${a}'`)
    .join(' ');
  const out = await new Promise<string>((resolve, reject) =>
    execFile(
      'script',
      ['-qec', command, '/dev/null'],
      { env: { PATH: process.env.PATH, DATABASE_URL: t.url, HOME: config } },
      (err, stdout) => (err ? reject(err) : resolve(stdout)),
    ),
  );
  expect(out).toMatch(/\[#{24}\] 100% 1\/1 files · [\d.]+\/[\d.]+ MB · 10 tokens · \d\d:\d\d elapsed · ETA/);
  expect(out).toMatch(/1 transcript\(s\) under .*: 1 newly registered/);
  expect(out).not.toContain('"event"');
});

test('the progress line shows files, MB, tokens, elapsed and ETA', () => {
  expect(
    progressLine({
      files_done: 3,
      files_total: 12,
      bytes_done: 256 * 1024 * 1024,
      bytes_total: 1024 * 1024 * 1024,
      tokens: 1_234_567_890,
      elapsed_s: 65,
      eta_s: 195,
    }),
  ).toBe('[######------------------] 25% 3/12 files · 256.0/1024.0 MB · 1.23B tokens · 01:05 elapsed · ETA 03:15');
});
