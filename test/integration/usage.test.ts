import { appendFileSync, readFileSync, renameSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { sessionActivities } from '../../activities/sessions';
import { fold as readerFold } from '../../activities/usage/readers';
import { sessionUsageActivities } from '../../activities/usage/sessionUsage';
import { usageViewActivities } from '../../activities/usage/usageViews';
import { UNRECORDED_USAGE_UNDERCOUNT } from '../../domain/usage/buckets';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf } from '../helpers/fixtures';
import {
  claudeAssistant,
  claudeProgress,
  claudeUser,
  codexMeta,
  codexSubAgent,
  codexTokens,
  codexTurn,
  fixtureDir,
  writeLines,
} from '../helpers/usageFixtures';

let t: TestDatabase;
let u: ReturnType<typeof sessionUsageActivities>;
let dir: string;

beforeEach(async () => {
  t = await createTestDatabase();
  u = sessionUsageActivities({ db: t.db });
  dir = fixtureDir();
  const s = sessionActivities({ db: t.db });
  for (const [id, harness] of [
    ['c1', 'claude'],
    ['x1', 'codex'],
    ['k1', 'cursor'],
  ] as const)
    await s.registerSession({ sessionId: id, actorId: 'a', harness, machine: 'm1' });
});
afterEach(async () => {
  await t.drop();
});

const foldClaude = (path: string, session = 'c1') =>
  u.foldSessionUsage({ sessionId: session, harness: 'claude', artifacts: [path] });
const fields = async (id: string) => (await u.usageFields([id])).get(id)!;
const model = 'claude-sonnet-4-5-20250929';

describe('Claude transcripts', () => {
  test('U5 U7 message.usage becomes disjoint buckets: cache writes split by lifetime, thinking inside output, iterations ignored', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [
      claudeAssistant('m1', {
        input: 100,
        cacheRead: 1000,
        cacheCreate: 700,
        write5m: 200,
        write1h: 400,
        output: 50,
        thinking: 20,
      }),
    ]);
    const r = await foldClaude(main);
    // the 100-token remainder of the aggregate not covered by the split is a 5-minute write
    expect(r.totals[model]!.all).toEqual({
      input: 100,
      cached_input: 1000,
      cache_write: 300,
      cache_write_long: 400,
      output: 50,
      reasoning: 20,
    });
    expect(r.usage_tokens).toBe(100 + 1000 + 300 + 400 + 50); // reasoning is never added again
    expect(r.status).toBe('measured');
    expect((await fields('c1')).usage_note).toContain(UNRECORDED_USAGE_UNDERCOUNT);
  });

  test('U6 subagent files count, with one message-id dedup set across files; progress copies, tool results and synthetic rows do not', async () => {
    const main = join(dir, 's1.jsonl');
    const streamed = [1, 1, 1130].map((output) => claudeAssistant('m1', { input: 10, output }));
    const later = Array.from({ length: 6 }, (_, i) => claudeAssistant(`z${i}`, { input: 1, output: 1 })); // closes m1 before its replay appears
    writeLines(main, [
      ...streamed,
      claudeProgress(claudeAssistant('sub1', { input: 5, output: 7 }).message),
      claudeUser({ input_tokens: 999, output_tokens: 999 }),
      claudeAssistant('syn', { input: 999, output: 999 }, { model: '<synthetic>' }),
      ...later,
    ]);
    writeLines(join(dir, 's1', 'subagents', 'agent-a1.jsonl'), [
      claudeAssistant('sub1', { input: 5, output: 7 }),
      claudeAssistant('m1', { input: 10, output: 1130 }, { sidechain: true }),
    ]);
    writeLines(join(dir, 's1', 'subagents', 'agent-a2.jsonl'), [
      claudeAssistant('sub2', { input: 3, output: 4 }, { model: 'claude-opus-4-5' }),
    ]);
    const r = await foldClaude(main);
    expect(r.totals[model]!.all).toMatchObject({ input: 21, output: 1143 });
    expect(r.totals['claude-opus-4-5']!.all).toMatchObject({ input: 3, output: 4 });
    expect(r.usage_tokens).toBe(21 + 1143 + 7);
  });

  test('U9 folds read only new bytes: an append between folds adds, a repeated fold of the same bytes cannot inflate', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [claudeAssistant('m1', { input: 10, output: 5 })]);
    expect((await foldClaude(main)).usage_tokens).toBe(15);
    expect((await foldClaude(main)).usage_tokens).toBe(15);
    writeLines(
      main,
      [claudeAssistant('m2', { input: 20, output: 10 }), claudeAssistant('m1', { input: 10, output: 5 })],
      true,
    );
    expect((await foldClaude(main)).usage_tokens).toBe(45);
    const cp = await t.db
      .selectFrom('session_usage')
      .select('checkpoint')
      .where('session_id', '=', 'c1')
      .executeTakeFirstOrThrow();
    expect((cp.checkpoint as { files: Record<string, { offset: number }> }).files[main]!.offset).toBeGreaterThan(0);
    // a half-written last row is left for the next fold, never split
    appendFileSync(main, JSON.stringify(claudeAssistant('m3', { input: 1, output: 1 })).slice(0, 40));
    expect((await foldClaude(main)).usage_tokens).toBe(45);
  });

  test('U5 U12 a model named like an Object.prototype member (constructor, __proto__) is counted and priced like any other, across folds', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [
      claudeAssistant('m1', { input: 10, output: 5 }, { model: 'constructor' }),
      claudeAssistant('m2', { input: 20, output: 10 }, { model: '__proto__' }),
      claudeAssistant('m3', { input: 1, output: 1 }),
    ]);
    const first = await foldClaude(main);
    expect(first.status).toBe('measured');
    expect(first.usage_tokens).toBe(47);
    // the next fold starts from the checkpoint read back from Postgres, where the names are plain keys
    writeLines(main, [claudeAssistant('m4', { input: 100, output: 0 }, { model: 'constructor' })], true);
    const second = await foldClaude(main);
    expect(second.usage_tokens).toBe(147);
    expect(Object.hasOwn(second.totals, 'constructor')).toBe(true);
    expect(Object.getOwnPropertyDescriptor(second.totals, 'constructor')?.value.all.input).toBe(110);
    expect(Object.getOwnPropertyDescriptor(second.totals, '__proto__')?.value.all.output).toBe(10);
    expect(Object.getPrototypeOf(second.totals)).toBe(Object.prototype);
    const f = await fields('c1');
    expect(f.usage_tokens).toBe(147);
    expect(f.cost_caveat).toContain('constructor');
    expect(f.cost_caveat).toContain('__proto__');
  });

  test('U9 an incremental fold equals one full fold: a transcript and its subagent appended in cuts that split rows and calls, folded after each cut, give the totals one fold of the final files gives, by either row reader', async () => {
    const s = sessionActivities({ db: t.db });
    const rows = (prefix: string, calls: number) =>
      Array.from({ length: calls }, (_, i) => [
        ...[1, 1, 100 + i].map((output) => claudeAssistant(`${prefix}${i}`, { input: 10 + i, cacheRead: 7, output })),
        claudeUser({ input_tokens: 999, output_tokens: 999 }),
        ...(i % 5 === 0
          ? [claudeProgress(claudeAssistant(`${prefix}${i}`, { input: 10 + i, output: 100 + i }).message)]
          : []),
        ...(i % 7 === 0 ? [claudeAssistant(`syn${i}`, { input: 5, output: 5 }, { model: '<synthetic>' })] : []),
      ]).flat();
    const main = join(dir, 'inc.jsonl');
    const sub = join(dir, 'inc', 'subagents', 'agent-1.jsonl');
    const text = (r: object[]) => r.map((row) => `${JSON.stringify(row)}\n`).join('');
    const mainText = text([...rows('m', 40), claudeAssistant('s3', { input: 1, output: 1 })]); // a call copied from the subagent
    const subText = text(rows('s', 12));
    writeLines(sub, []);
    writeFileSync(main, '');
    writeFileSync(sub, '');
    const readers = { parsed: String(2 ** 40), bytes: '0' };
    const totals: Record<string, unknown> = {};
    try {
      for (const [name, after] of Object.entries(readers)) {
        process.env.YOKE_BYTE_READER_AFTER_BYTES = after;
        writeFileSync(main, '');
        writeFileSync(sub, '');
        const incremental = `inc-${name}`;
        await s.registerSession({ sessionId: incremental, actorId: 'a', harness: 'claude', machine: 'm1' });
        // cuts at arbitrary bytes: rows are left half-written, a call's snapshots fall in different folds
        const cuts = [0.07, 0.19, 0.2, 0.41, 0.63, 0.64, 0.9, 1];
        let [m, k] = [0, 0];
        for (const cut of cuts) {
          const [mEnd, kEnd] = [Math.floor(mainText.length * cut), Math.floor(subText.length * Math.min(1, cut * 1.5))];
          appendFileSync(main, mainText.slice(m, mEnd));
          if (kEnd > k) appendFileSync(sub, subText.slice(k, kEnd)); // the subagent's file is left unchanged by the later folds
          [m, k] = [mEnd, kEnd];
          await foldClaude(main, incremental);
        }
        const full = `full-${name}`;
        await s.registerSession({ sessionId: full, actorId: 'a', harness: 'claude', machine: 'm1' });
        totals[incremental] = (await foldClaude(main, incremental)).totals;
        totals[full] = (await foldClaude(main, full)).totals;
      }
    } finally {
      delete process.env.YOKE_BYTE_READER_AFTER_BYTES;
    }
    const expected = {
      [model]: {
        all: {
          input: 40 * 10 + (39 * 40) / 2 + 12 * 10 + (11 * 12) / 2,
          cached_input: 7 * 52,
          cache_write: 0,
          cache_write_long: 0,
          output: 52 * 100 + (39 * 40) / 2 + (11 * 12) / 2,
          reasoning: 0,
        },
        above_200k: { input: 0, cached_input: 0, cache_write: 0, cache_write_long: 0, output: 0, reasoning: 0 },
      },
    };
    for (const id of Object.keys(totals)) expect({ [id]: totals[id] }).toEqual({ [id]: expected });
  });

  test('U10 another file under the same path (a rotation: a new inode, even a larger one) is re-read from the start and marked partial, each call still counted once', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [
      claudeAssistant('m1', { input: 10, output: 5 }),
      claudeAssistant('m2', { input: 10, output: 5 }),
    ]);
    expect((await foldClaude(main)).usage_tokens).toBe(30);
    const replacement = join(dir, 'next.jsonl');
    writeLines(replacement, [
      claudeAssistant('m1', { input: 10, output: 5 }),
      claudeAssistant('m2', { input: 10, output: 5 }),
      claudeAssistant('m3', { input: 1, output: 1 }),
    ]);
    renameSync(replacement, main);
    const rotated = await foldClaude(main);
    expect(rotated).toMatchObject({ status: 'partial', usage_tokens: 32 });
    expect(rotated.reasons).toEqual([expect.stringContaining('truncated or rotated')]);
  });

  test('U9 an oversized irrelevant row costs no completeness; an unreadable assistant row marks partial with its reason', async () => {
    const main = join(dir, 's1.jsonl');
    const snapshot = JSON.stringify({
      type: 'file-history-snapshot',
      snapshot: 'x'.repeat(9 * 1024 * 1024),
      usage: 'mentions usage',
    });
    writeFileSync(main, `${JSON.stringify(claudeAssistant('m1', { input: 10, output: 5 }))}\n${snapshot}\n`);
    const clean = await foldClaude(main);
    expect(clean).toMatchObject({ status: 'measured', usage_tokens: 15, reasons: [] });
    appendFileSync(main, '{"type":"assistant","message":{"id":"broken","usage":{"input_tokens":\n');
    const partial = await foldClaude(main);
    expect(partial.status).toBe('partial');
    expect(partial.reasons[0]).toMatch(/unreadable assistant row in s1\.jsonl/);
    expect((await fields('c1')).usage_note).toContain('unreadable assistant row');
  });

  test('U9 U10 a row with an invalid token count (1e300, -5000, "12", 2^53+1) adds none of its counts: partial with a reason naming the rows; alone it is unavailable, never 1e300 or a zero', async () => {
    const main = join(dir, 'h1.jsonl');
    const raw = (id: string, input: string) =>
      `{"type":"assistant","message":{"id":"${id}","model":"${model}","usage":{"input_tokens":${input},"output_tokens":5}}}\n`;
    writeFileSync(main, raw('m1', '1e300'));
    const alone = await foldClaude(main);
    expect(alone).toMatchObject({ status: 'unavailable', usage_tokens: null });
    expect(alone.reasons).toEqual([
      `no readable usage rows in ${main}`,
      expect.stringMatching(/^1 assistant row in h1\.jsonl with invalid token counts \(not a non-negative integer\)/),
    ]);
    expect(await fields('c1')).toMatchObject({ usage_status: 'unavailable', usage_tokens: null, usage_cost_usd: null });
    appendFileSync(main, raw('m2', '10') + raw('m3', '-5000') + raw('m4', '"12"') + raw('m5', '9007199254740993'));
    const partial = await foldClaude(main);
    expect(partial).toMatchObject({ status: 'partial', usage_tokens: 15 });
    expect(partial.reasons).toEqual([
      `4 assistant rows in h1.jsonl with invalid token counts (not a non-negative integer), not counted; the last ended at byte ${Buffer.byteLength(readFileSync(main))}`,
    ]);
    expect(await fields('c1')).toMatchObject({
      usage_status: 'partial',
      usage_tokens: 15,
      usage_note: expect.stringContaining('4 assistant rows in h1.jsonl with invalid token counts'),
    });
    expect((await fields('c1')).usage_cost_usd).toBeLessThan(1);
  });

  test('U10 a truncated file is re-read from the start and marked partial; a reading of nothing never replaces a measured one', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [
      claudeAssistant('m1', { input: 10, output: 5 }),
      claudeAssistant('m2', { input: 10, output: 5 }),
    ]);
    await foldClaude(main);
    writeLines(main, [claudeAssistant('m3', { input: 1, output: 1 })]);
    const rotated = await foldClaude(main);
    expect(rotated.status).toBe('partial');
    expect(rotated.reasons).toEqual([expect.stringContaining('truncated or rotated')]);
    expect(rotated.usage_tokens).toBe(32); // what was measured is never unlearned
    // a re-fold (new reader version) that finds nothing readable measures nothing: the measured reading stays
    truncateSync(main, 0);
    await t.db
      .updateTable('session_usage')
      .set({ checkpoint: JSON.stringify({ reader_version: 0, files: {}, reasons: [] }) })
      .execute();
    const kept = await foldClaude(main);
    expect(kept).toMatchObject({ replaced: false, status: 'partial', usage_tokens: 32 });
  });

  test('U10 no source means unavailable with a reason, never a fabricated zero', async () => {
    const none = join(dir, 'none.jsonl');
    writeLines(none, [{ type: 'user', message: { role: 'user', content: 'hello' } }]);
    const r = await foldClaude(none);
    expect(r).toMatchObject({ status: 'unavailable', usage_tokens: null });
    expect(r.reasons).toContain(`no usage rows in ${none}`);
    expect(await fields('c1')).toMatchObject({
      usage_tokens: null,
      usage_status: 'unavailable',
      usage_cost_usd: null,
      usage_cost_status: 'unavailable',
    });
    expect((await fields('c1')).usage_note).toMatch(/^no usage source was found/);
    expect(await fields('x1')).toMatchObject({
      usage_status: 'unavailable',
      usage_note: expect.stringContaining('nothing has been folded'),
    });
  });

  test('U10 a missing artifact is unavailable with the reason "missing file", never "no usage rows" or a zero', async () => {
    const gone = join(dir, 'never-written.jsonl');
    const r = await foldClaude(gone);
    expect(r).toMatchObject({ status: 'unavailable', usage_tokens: null, replaced: true });
    expect(r.reasons[0]).toBe(`artifact not found (missing file): ${gone}`);
    expect(r.reasons.join('; ')).not.toContain('no usage rows');
    expect(await fields('c1')).toMatchObject({
      usage_tokens: null,
      usage_status: 'unavailable',
      usage_note: expect.stringContaining('missing file'),
    });
  });

  test('U9 U10 a measured session folded again from a path that is gone says the source is missing (partial), not only its old reasons', async () => {
    const main = join(dir, 'measured-then-gone.jsonl');
    writeLines(main, [claudeAssistant('g1', { input: 10, output: 5 })]);
    expect(await foldClaude(main)).toMatchObject({ status: 'measured', usage_tokens: 15 });
    const gone = join(dir, 'moved-away.jsonl');
    const again = await foldClaude(gone);
    expect(again.usage_tokens).toBe(15);
    expect(again.status).not.toBe('measured');
    expect(again.reasons.join('; ')).toContain(`artifact not found (missing file): ${gone}`);
  });

  test('U10 concurrent fold requests for one session are serialized and count every call once', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(
      main,
      Array.from({ length: 200 }, (_, i) => claudeAssistant(`m${i}`, { input: 1, output: 1 })),
    );
    const pools = Array.from({ length: 5 }, () => sessionUsageActivities({ db: t.connect(1) }));
    await Promise.all(pools.map((p) => p.foldSessionUsage({ sessionId: 'c1', harness: 'claude', artifacts: [main] })));
    expect((await fields('c1')).usage_tokens).toBe(400);
  });

  test('U10 a batch of folds (as a backfill runs them) counts every call once: a session another fold wrote meanwhile is folded again from the newer checkpoint; an unregistered session fails alone', async () => {
    const s = sessionActivities({ db: t.db });
    await s.registerSession({ sessionId: 'c2', actorId: 'a', harness: 'claude', machine: 'm1' });
    const [a, b] = [join(dir, 'a.jsonl'), join(dir, 'b.jsonl')];
    writeLines(a, [claudeAssistant('a1', { input: 10, output: 5 }), claudeAssistant('a2', { input: 10, output: 5 })]);
    writeLines(b, [claudeAssistant('b1', { input: 1, output: 1 })]);
    let raced = false;
    const batch = sessionUsageActivities({
      db: t.db,
      folder: async (harness, previous, artifacts) => {
        const reading = await readerFold(harness, previous, artifacts);
        if (!raced && artifacts[0] === a) {
          raced = true; // after the batch read c1, more rows come and another fold of c1 lands
          writeLines(a, [claudeAssistant('a3', { input: 100, output: 50 })], true);
          await u.foldSessionUsage({ sessionId: 'c1', harness: 'claude', artifacts: [a] });
        }
        return reading;
      },
    });
    const results = await batch.foldSessionsUsage([
      { sessionId: 'c1', harness: 'claude', artifacts: [a] },
      { sessionId: 'c2', harness: 'claude', artifacts: [b] },
      { sessionId: 'nobody', harness: 'claude', artifacts: [b] },
    ]);
    expect(results[0]).toMatchObject({ session_id: 'c1', usage_tokens: 30 + 150 });
    expect(results[1]).toMatchObject({ session_id: 'c2', usage_tokens: 2 });
    expect(results[2]).toBeInstanceOf(Error);
    expect((await fields('c1')).usage_tokens).toBe(180);
    expect((await u.foldSessionUsage({ sessionId: 'c1', harness: 'claude', artifacts: [a] })).usage_tokens).toBe(180);
  });

  test("U10 a batch in which Postgres refuses one session's write still writes the others; the refused one fails alone", async () => {
    const s = sessionActivities({ db: t.db });
    await s.registerSession({ sessionId: 'c2', actorId: 'a', harness: 'claude', machine: 'm1' });
    const [a, b] = [join(dir, 'a.jsonl'), join(dir, 'b.jsonl')];
    writeLines(a, [claudeAssistant('a1', { input: 10, output: 5 })]);
    writeLines(b, [claudeAssistant('b1', { input: 1, output: 1 })]);
    const batch = sessionUsageActivities({
      db: t.db,
      folder: async (harness, previous, artifacts) => {
        const reading = await readerFold(harness, previous, artifacts);
        if (artifacts[0] !== b) return reading;
        // a model name jsonb cannot store: the write of this session's totals is refused
        return { ...reading, totals: { 'bad\u0000model': Object.values(reading.totals)[0]! } };
      },
    });
    const results = await batch.foldSessionsUsage([
      { sessionId: 'c1', harness: 'claude', artifacts: [a] },
      { sessionId: 'c2', harness: 'claude', artifacts: [b] },
    ]);
    expect(results[0]).toMatchObject({ session_id: 'c1', usage_tokens: 15 });
    expect(results[1]).toBeInstanceOf(Error);
    expect((await fields('c1')).usage_tokens).toBe(15);
  });

  test('U9 a new reader version re-folds once from the start', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [claudeAssistant('m1', { input: 10, output: 5 })]);
    await foldClaude(main);
    await t.db
      .updateTable('session_usage')
      .set({
        checkpoint: JSON.stringify({ reader_version: 0, files: { [main]: { offset: 999999, size: 1 } }, reasons: [] }),
      })
      .execute();
    expect((await foldClaude(main)).usage_tokens).toBe(15);
  });
});

describe('Codex rollouts', () => {
  test('U5 U6 cumulative token_count totals per thread; info:null and re-emitted totals cannot inflate; child threads summed once', async () => {
    const parent = join(dir, 'rollout-2026-11-29T10-00-00-aaaaaaaa-0000-0000-0000-000000000001.jsonl');
    writeLines(parent, [
      codexMeta('aaaaaaaa-0000-0000-0000-000000000001', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex'),
      codexTokens('2026-11-29T10:00:02Z', null),
      codexTokens('2026-11-29T10:00:03Z', { input: 1000, cached: 400, output: 300, reasoning: 100 }),
      codexTokens('2026-11-29T10:00:04Z', { input: 1000, cached: 400, output: 300, reasoning: 100 }), // re-emitted
      codexSubAgent('bbbbbbbb-0000-0000-0000-000000000002', '2026-11-29T10:00:05Z'),
    ]);
    const child = join(dir, 'rollout-2026-11-29T10-00-06-bbbbbbbb-0000-0000-0000-000000000002.jsonl');
    writeLines(child, [
      codexMeta('bbbbbbbb-0000-0000-0000-000000000002', '2026-11-29T10:00:06Z', true),
      codexMeta('aaaaaaaa-0000-0000-0000-000000000001', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex', '2026-11-29T10:00:01Z'),
      codexTokens('2026-11-29T10:00:03Z', { input: 1000, cached: 400, output: 300, reasoning: 100 }), // the parent's history, replayed
      codexTurn('gpt-5-codex', '2026-11-29T10:00:07Z'),
      codexTokens('2026-11-29T10:00:08Z', { input: 200, cached: 50, output: 80, reasoning: 30 }),
    ]);
    const r = await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [parent] });
    // input excludes cached input; output includes reasoning (a labelled subset)
    expect(r.totals['gpt-5-codex']!.all).toEqual({
      input: 600 + 150,
      cached_input: 400 + 50,
      cache_write: 0,
      cache_write_long: 0,
      output: 380,
      reasoning: 130,
    });
    expect((await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [parent] })).usage_tokens).toBe(
      r.usage_tokens,
    );
  });

  test('U6 a Codex child thread that starts on the next day (a later date folder) is found by its thread id and summed', async () => {
    const sessions = join(dir, 'codex-home', 'sessions');
    const parent = join(
      sessions,
      '2026',
      '11',
      '30',
      'rollout-2026-11-30T23-59-00-cccccccc-0000-0000-0000-000000000003.jsonl',
    );
    writeLines(parent, [
      codexMeta('cccccccc-0000-0000-0000-000000000003', '2026-11-30T23:59:00Z'),
      codexTurn('gpt-5-codex', '2026-11-30T23:59:01Z'),
      codexTokens('2026-11-30T23:59:02Z', { input: 1000, cached: 0, output: 100, reasoning: 0 }),
      codexSubAgent('aaaaaaaa-0000-0000-0000-0000000000a1', '2026-11-30T23:59:30Z'),
      codexSubAgent('dddddddd-0000-0000-0000-000000000004', '2026-11-30T23:59:59Z'),
    ]);
    // a sibling child of the parent's day
    writeLines(
      join(sessions, '2026', '11', '30', 'rollout-2026-11-30T23-59-31-aaaaaaaa-0000-0000-0000-0000000000a1.jsonl'),
      [
        codexMeta('aaaaaaaa-0000-0000-0000-0000000000a1', '2026-11-30T23:59:31Z', true),
        codexTurn('gpt-5-codex', '2026-11-30T23:59:32Z'),
        codexTokens('2026-11-30T23:59:33Z', { input: 100, cached: 0, output: 10, reasoning: 0 }),
      ],
    );
    // an unrelated rollout of the same day and a folder from before the parent are not read
    writeLines(
      join(sessions, '2026', '11', '29', 'rollout-2026-11-29T10-00-00-eeeeeeee-0000-0000-0000-000000000005.jsonl'),
      [codexMeta('eeeeeeee-0000-0000-0000-000000000005', '2026-11-29T10:00:00Z')],
    );
    const child = join(
      sessions,
      '2026',
      '12',
      '01',
      'rollout-2026-12-01T00-00-01-dddddddd-0000-0000-0000-000000000004.jsonl',
    );
    writeLines(child, [
      codexMeta('dddddddd-0000-0000-0000-000000000004', '2026-12-01T00:00:01Z', true),
      // its replay of the parent's history names the sibling, whose rollout is a day earlier
      codexSubAgent('aaaaaaaa-0000-0000-0000-0000000000a1', '2026-11-30T23:59:30Z'),
      codexTurn('gpt-5-codex', '2026-12-01T00:00:02Z'),
      codexTokens('2026-12-01T00:00:03Z', { input: 500, cached: 0, output: 50, reasoning: 0 }),
    ]);
    const r = await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [parent] });
    expect(r.totals['gpt-5-codex']!.all).toMatchObject({ input: 1600, output: 160 });
    // U10: every named child was found (the sibling by the parent's search): the reading is whole
    expect(r).toMatchObject({ status: 'measured', reasons: [] });
  });

  test('U6 a Codex child thread named before its rollout is written is summed by a later fold, the parent read only once', async () => {
    const parent = join(dir, 'rollout-2026-11-29T10-00-00-ffffffff-0000-0000-0000-000000000006.jsonl');
    writeLines(parent, [
      codexMeta('ffffffff-0000-0000-0000-000000000006', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex'),
      codexTokens('2026-11-29T10:00:03Z', { input: 1000, cached: 0, output: 100, reasoning: 0 }),
      codexSubAgent('99999999-0000-0000-0000-000000000007', '2026-11-29T10:00:05Z'),
    ]);
    const fold = () => u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [parent] });
    // U10: the named child is not found yet: the reading is partial, naming it, not whole without it
    const before = await fold();
    expect(before).toMatchObject({ usage_tokens: 1100, status: 'partial' });
    expect(before.reasons.join(' ')).toContain('child thread 99999999-0000-0000-0000-000000000007');
    writeLines(join(dir, 'rollout-2026-11-29T10-00-06-99999999-0000-0000-0000-000000000007.jsonl'), [
      codexMeta('99999999-0000-0000-0000-000000000007', '2026-11-29T10:00:06Z', true),
      codexTurn('gpt-5-codex', '2026-11-29T10:00:07Z'),
      codexTokens('2026-11-29T10:00:08Z', { input: 200, cached: 0, output: 20, reasoning: 0 }),
    ]);
    expect(await fold()).toMatchObject({ usage_tokens: 1320, status: 'measured', reasons: [] });
    expect((await fold()).usage_tokens).toBe(1320);
  });

  test('U3 Codex attests its served model and context window from the rollout; a request never attests', async () => {
    const path = join(dir, 'rollout-w.jsonl');
    writeLines(path, [
      codexMeta('dddddddd-0000-0000-0000-000000000004', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5.1-codex'),
      codexTokens('2026-11-29T10:00:03Z', { input: 10, cached: 0, output: 1, reasoning: 0 }),
    ]);
    await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [path] });
    const row = await t.db
      .selectFrom('sessions')
      .select(['served_model', 'served_window', 'requested_model'])
      .where('session_id', '=', 'x1')
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ served_model: 'gpt-5.1-codex', served_window: 272000, requested_model: null });
  });

  test('U3 a Codex window stated before any model (task_started) is attested, and the model later joins it', async () => {
    const path = join(dir, 'rollout-window-first.jsonl');
    const served = () =>
      t.db
        .selectFrom('sessions')
        .select(['served_model', 'served_window'])
        .where('session_id', '=', 'x1')
        .executeTakeFirstOrThrow();
    writeLines(path, [
      codexMeta('dddddddd-0000-0000-0000-000000000005', '2026-11-29T10:00:00Z'),
      {
        timestamp: '2026-11-29T10:00:00Z',
        type: 'event_msg',
        payload: { type: 'task_started', model_context_window: 258400 },
      },
    ]);
    await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [path] });
    expect(await served()).toEqual({ served_model: null, served_window: 258400 });
    writeLines(path, [codexTurn('gpt-5.1-codex')], true);
    await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [path] });
    expect(await served()).toEqual({ served_model: 'gpt-5.1-codex', served_window: 272000 });
  });

  test('U2 Codex turn_context.effort is stored as the served effort, apart from the requested one', async () => {
    const path = join(dir, 'rollout-e.jsonl');
    writeLines(path, [
      codexMeta('dddddddd-0000-0000-0000-00000000000e', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5.1-codex'),
      codexTokens('2026-11-29T10:00:03Z', { input: 10, cached: 0, output: 1, reasoning: 0 }),
    ]);
    await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [path] });
    const row = await t.db
      .selectFrom('sessions')
      .select(['served_effort', 'requested_effort'])
      .where('session_id', '=', 'x1')
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ served_effort: 'high', requested_effort: null });
  });

  test('U8 an unreadable turn_context row names the unreadable model history in cost_caveat, not in token completeness', async () => {
    const path = join(dir, 'rollout-u.jsonl');
    writeLines(path, [
      codexMeta('dddddddd-0000-0000-0000-00000000000f', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex'),
      codexTokens('2026-11-29T10:00:03Z', { input: 100, cached: 0, output: 10, reasoning: 0 }),
    ]);
    appendFileSync(path, '{"timestamp":"2026-11-29T10:00:04Z","type":"turn_context","payload":{"model":"gpt-5.2-co\n');
    const r = await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [path] });
    expect(r.status).toBe('measured');
    const f = await fields('x1');
    expect(f.cost_caveat).toContain('unreadable model history in rollout-u.jsonl');
    expect(f.usage_note).not.toContain('model history');
  });

  test('U8 a thread served by several models gets a cost_caveat, separate from token completeness', async () => {
    const path = join(dir, 'rollout-x.jsonl');
    writeLines(path, [
      codexMeta('cccccccc-0000-0000-0000-000000000003', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex'),
      codexTurn('gpt-5.2-codex'),
      codexTokens('2026-11-29T10:00:03Z', { input: 100, cached: 0, output: 10, reasoning: 0 }),
    ]);
    const r = await u.foldSessionUsage({ sessionId: 'x1', harness: 'codex', artifacts: [path] });
    expect(r.status).toBe('measured');
    expect(await fields('x1')).toMatchObject({
      usage_status: 'measured',
      cost_caveat: expect.stringContaining('several models served thread'),
    });
  });
});

describe('Cursor', () => {
  test('U11 a settled print-mode result is folded once per request_id; a half-written capture is not read; older builds are unavailable', async () => {
    const capture = join(dir, 'result.json');
    writeFileSync(
      capture,
      JSON.stringify({
        type: 'result',
        subtype: 'success',
        is_error: false,
        session_id: 'k',
        request_id: 'r1',
        usage: { inputTokens: 100, outputTokens: 20, cacheReadTokens: 50, cacheWriteTokens: 5 },
      }).slice(0, 30),
    );
    expect((await u.foldSessionUsage({ sessionId: 'k1', harness: 'cursor', artifacts: [capture] })).status).toBe(
      'unavailable',
    );
    writeFileSync(
      capture,
      JSON.stringify({
        type: 'result',
        subtype: 'success',
        is_error: false,
        session_id: 'k',
        request_id: 'r1',
        usage: { inputTokens: 100, outputTokens: 20, cacheReadTokens: 50, cacheWriteTokens: 5 },
      }),
    );
    const r = await u.foldSessionUsage({ sessionId: 'k1', harness: 'cursor', artifacts: [capture] });
    expect(r.usage_tokens).toBe(175);
    expect((await u.foldSessionUsage({ sessionId: 'k1', harness: 'cursor', artifacts: [capture] })).usage_tokens).toBe(
      175,
    );
    const old = join(dir, 'old.json');
    writeFileSync(old, JSON.stringify({ type: 'result', subtype: 'success', session_id: 'k', request_id: '' }));
    const s = sessionActivities({ db: t.db });
    await s.registerSession({ sessionId: 'k2', actorId: 'a', harness: 'cursor' });
    const none = await u.foldSessionUsage({ sessionId: 'k2', harness: 'cursor', artifacts: [old] });
    expect(none.status).toBe('unavailable');
    expect(none.reasons).toEqual(expect.arrayContaining([expect.stringContaining('without usage')]));
  });

  test('U11 a pretty-printed print-mode result is folded once it is whole; while half-written it is not read', async () => {
    const capture = join(dir, 'pretty-result.json');
    const result = JSON.stringify(
      {
        type: 'result',
        subtype: 'success',
        is_error: false,
        session_id: 'k',
        request_id: 'pretty-1',
        usage: { inputTokens: 100, outputTokens: 20, cacheReadTokens: 50, cacheWriteTokens: 5 },
      },
      null,
      2,
    );
    const s = sessionActivities({ db: t.db });
    await s.registerSession({ sessionId: 'k3', actorId: 'a', harness: 'cursor' });
    writeFileSync(capture, result.slice(0, 80));
    const half = await u.foldSessionUsage({ sessionId: 'k3', harness: 'cursor', artifacts: [capture] });
    expect(half.status).toBe('unavailable');
    writeFileSync(capture, `${result}\n`);
    const whole = await u.foldSessionUsage({ sessionId: 'k3', harness: 'cursor', artifacts: [capture] });
    expect(whole.usage_tokens).toBe(175);
    const again = await u.foldSessionUsage({ sessionId: 'k3', harness: 'cursor', artifacts: [capture] });
    expect(again.usage_tokens).toBe(175);
  });

  test('U11 a capture rewritten in place by a resumed print-mode run (longer or shorter) counts each request once, and stays measured', async () => {
    const capture = join(dir, 'rewritten-result.json');
    const result = (requestId: string, inputTokens: number) =>
      `${JSON.stringify({ type: 'result', subtype: 'success', is_error: false, session_id: 'k', request_id: requestId, usage: { inputTokens, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 } })}\n`;
    const s = sessionActivities({ db: t.db });
    await s.registerSession({ sessionId: 'k4', actorId: 'a', harness: 'cursor' });
    const fold = () => u.foldSessionUsage({ sessionId: 'k4', harness: 'cursor', artifacts: [capture] });
    writeFileSync(capture, result('req-1', 100));
    expect((await fold()).usage_tokens).toBe(100);
    writeFileSync(capture, result('req-2-with-a-longer-request-id', 10)); // same inode, longer
    expect(await fold()).toMatchObject({ usage_tokens: 110, status: 'measured' });
    writeFileSync(capture, result('r3', 1)); // same inode, shorter
    expect(await fold()).toMatchObject({ usage_tokens: 111, status: 'measured' });
    expect((await fold()).usage_tokens).toBe(111);
  });

  test('U6 Cursor child turns flagged is_subagent_session count, deduplicated by generation_id', async () => {
    const hooks = join(dir, 'hooks.jsonl');
    writeLines(hooks, [
      {
        hook_event_name: 'stop',
        conversation_id: 'c',
        generation_id: 'g1',
        status: 'completed',
        loop_count: 1,
        input_tokens: 10,
        output_tokens: 2,
      },
      {
        hook_event_name: 'stop',
        conversation_id: 'c',
        generation_id: 'g1',
        status: 'completed',
        loop_count: 1,
        input_tokens: 10,
        output_tokens: 2,
      },
      {
        hook_event_name: 'stop',
        conversation_id: 'c',
        generation_id: 'g2',
        is_subagent_session: true,
        input_tokens: 5,
        output_tokens: 1,
      },
      { hook_event_name: 'stop', conversation_id: 'c', generation_id: 'g3', status: 'completed' },
    ]);
    expect((await u.foldSessionUsage({ sessionId: 'k1', harness: 'cursor', artifacts: [hooks] })).usage_tokens).toBe(
      18,
    );
  });
});

describe('cost and views', () => {
  test('U12 cost is derived from the revision effective at offered_at, per bucket, with the long-context tier; revisions are immutable', async () => {
    const main = join(dir, 's1.jsonl');
    writeLines(main, [
      // the shipped genai-prices revision keeps Sonnet 4.5's long-context tier (Sonnet 4's ended with its 1M beta)
      claudeAssistant('m1', { input: 1_000_000, output: 1 }, { model: 'claude-sonnet-4-5-20250929' }), // a streaming snapshot, replaced below
      claudeAssistant('m1', { input: 1_000_000, output: 1_000_000 }, { model: 'claude-sonnet-4-5-20250929' }),
      claudeAssistant('m2', { input: 100_000, output: 0 }, { model: 'claude-sonnet-4-5-20250929' }),
    ]);
    await foldClaude(main);
    // m1 is above 200k input: 6 + 22.5; m2 at the standard input rate: 0.3
    expect(await fields('c1')).toMatchObject({ usage_cost_usd: 28.8, usage_cost_status: 'priced' });
    const revision = join(dir, 'rev.json');
    writeFileSync(
      revision,
      JSON.stringify({
        revision_id: 'future',
        effective_at: '2099-01-01T00:00:00Z',
        source: 'test',
        rates: { 'claude-sonnet-4-5': { input: 1000, output: 1000 } },
      }),
    );
    expect(await u.importPricing({ file: revision })).toEqual({
      revision_id: 'future',
      imported: true,
      backdated: false,
    });
    expect((await fields('c1')).usage_cost_usd).toBe(28.8); // a later revision does not reprice this session
    // the same id and rates with another effective_at is no replay: it would re-price other sessions
    writeFileSync(
      revision,
      JSON.stringify({
        revision_id: 'future',
        effective_at: '2098-01-01T00:00:00Z',
        source: 'test',
        rates: { 'claude-sonnet-4-5': { input: 1000, output: 1000 } },
      }),
    );
    expect(await refusalOf(u.importPricing({ file: revision }))).toMatchObject({
      code: 'pricing_revision_immutable',
      message: expect.stringContaining('another effective_at'),
    });
    writeFileSync(
      revision,
      JSON.stringify({
        revision_id: 'future',
        effective_at: '2099-01-01T00:00:00Z',
        source: 'test',
        rates: { x: { input: 1 } },
      }),
    );
    expect((await refusalOf(u.importPricing({ file: revision }))).code).toBe('pricing_revision_immutable');
    await expect(sql`UPDATE pricing_revisions SET source = 'tampered'`.execute(t.db)).rejects.toThrow(/immutable/);
    // another revision at the same instant is refused naming the one in force then, not a bug report
    writeFileSync(
      revision,
      JSON.stringify({ revision_id: 'twin', effective_at: '2099-01-01T00:00:00Z', source: 'test', rates: {} }),
    );
    expect(await refusalOf(u.importPricing({ file: revision }))).toMatchObject({
      code: 'pricing_effective_at_taken',
      details: { revision_id: 'twin', taken_by: 'future' },
    });
    // blank names would be stored for good: refused as invalid, nothing imported
    for (const blank of [
      { revision_id: '   ', source: 'test', rates: {} },
      { revision_id: 'blank-model', source: 'test', rates: { ' ': { input: 1 } } },
    ]) {
      writeFileSync(revision, JSON.stringify({ ...blank, effective_at: '2099-06-01T00:00:00Z' }));
      expect((await refusalOf(u.importPricing({ file: revision }))).kind).toBe('usage');
    }
    expect((await u.listPricing()).map((r: { revision_id: string }) => r.revision_id)).not.toContain('blank-model');
  });

  test('U12 a back-dated revision is refused unless --backdate --reason; then audited and named in cost_caveat', async () => {
    const main = join(dir, 'bd.jsonl');
    writeLines(main, [claudeAssistant('m1', { input: 1_000_000, output: 0 })]);
    await foldClaude(main);
    const before = await fields('c1');
    expect(before).toMatchObject({ usage_cost_status: 'priced' });
    expect(before.usage_cost_usd).toBeGreaterThan(0);
    const revision = join(dir, 'zero.json');
    const effective = new Date(Date.now() - 3_600_000).toISOString();
    writeFileSync(
      revision,
      JSON.stringify({
        revision_id: 'all-zero',
        effective_at: effective,
        source: 'oops',
        rates: {
          'claude-sonnet-4-5': { input: 0, output: 0, cached_input: 0, cache_write: 0, cache_write_long: 0 },
        },
      }),
    );
    await t.db
      .updateTable('sessions')
      .set({ offered_at: sql`now() - interval '10 minutes'` })
      .where('session_id', '=', 'c1')
      .execute();
    const refused = await refusalOf(u.importPricing({ file: revision }));
    expect(refused).toMatchObject({ code: 'pricing_revision_backdated', details: { revision_id: 'all-zero' } });
    expect(refused.recovery).toContain('--backdate --reason');
    expect(await fields('c1')).toEqual(before); // nothing was re-priced
    expect((await refusalOf(u.importPricing({ file: revision, backdate: true }))).code).toBe(
      'backdate_reason_required',
    );
    await expect(
      u.importPricing({ file: revision, backdate: true, reason: 'vendor refunded the hour' }),
    ).resolves.toMatchObject({ imported: true, backdated: true });
    const after = await fields('c1');
    expect(after.usage_cost_usd).toBe(0);
    expect(after.cost_caveat).toContain('back-dated revision all-zero');
    expect(after.cost_caveat).toContain('vendor refunded the hour');
    // every cost the revision prices names it: the report's rows and total, and the machine's 24-hour sum
    const report = await usageViewActivities({ db: t.db }).usageReport({ by: 'session' });
    expect(report.rows).toEqual([
      expect.objectContaining({
        key: 'c1',
        cost_usd: 0,
        cost_caveat: expect.stringContaining('back-dated revision all-zero'),
      }),
    ]);
    expect(report.totals.cost_caveat).toContain('back-dated revision all-zero');
    expect(await u.machinesUsage()).toEqual([
      expect.objectContaining({
        machine_id: 'm1',
        cost_caveat: expect.stringContaining('back-dated revision all-zero'),
      }),
    ]);
    const audit = await t.db
      .selectFrom('events')
      .select('payload')
      .where('event_type', '=', 'PricingRevisionBackdated')
      .execute();
    expect(audit.map((e) => e.payload)).toEqual([
      expect.objectContaining({ revision_id: 'all-zero', reason: 'vendor refunded the hour' }),
    ]);
  });

  test('U12 an unknown model gives a named partial cost; an estimated revision stays labelled; price gaps never block capture', async () => {
    const revision = join(dir, 'est.json');
    writeFileSync(
      revision,
      JSON.stringify({
        revision_id: 'est-1',
        effective_at: '2020-01-01T00:00:00Z',
        source: 'guess',
        estimated: true,
        rates: { 'claude-sonnet-4-5': { input: 3, output: 15 } },
      }),
    );
    await u.importPricing({ file: revision, backdate: true, reason: 'test catalog for 2024 sessions' });
    await t.db
      .updateTable('sessions')
      .set({ offered_at: sql`'2024-06-01'::timestamptz` })
      .where('session_id', '=', 'c1')
      .execute();
    const main = join(dir, 's1.jsonl');
    writeLines(main, [
      claudeAssistant('m1', { input: 1_000_000, output: 0 }),
      claudeAssistant('m2', { input: 10, output: 10 }, { model: 'claude-mystery-9' }),
    ]);
    const folded = await foldClaude(main);
    expect(folded.status).toBe('measured');
    const f = await fields('c1');
    expect(f).toMatchObject({ usage_cost_usd: 3, usage_cost_status: 'partial' });
    expect(f.cost_caveat).toContain('estimated revision est-1');
    expect(f.cost_caveat).toContain('claude-mystery-9');
  });

  test('U13 the 24-hour cohort: ended inside it, or offered inside it and still open; probes and machine-less rows out', async () => {
    const s = sessionActivities({ db: t.db });
    const set = (id: string, values: Record<string, unknown>) =>
      t.db
        .updateTable('sessions')
        .set(values as never)
        .where('session_id', '=', id)
        .execute();
    await s.registerSession({ sessionId: 'old-open', actorId: 'a', machine: 'm1' });
    await set('old-open', { offered_at: sql`now() - interval '3 days'` });
    await s.registerSession({ sessionId: 'old-ended-today', actorId: 'a', machine: 'm2' });
    await set('old-ended-today', {
      offered_at: sql`now() - interval '3 days'`,
      terminated_at: sql`now() - interval '1 hour'`,
    });
    await s.registerSession({ sessionId: 'ended-long-ago', actorId: 'a', machine: 'm1' });
    await set('ended-long-ago', {
      offered_at: sql`now() - interval '3 days'`,
      ended_at: sql`now() - interval '2 days'`,
    });
    await s.registerSession({ sessionId: 'probe', actorId: 'a', machine: 'm1', probe: true });
    await s.registerSession({ sessionId: 'no-machine', actorId: 'a' });
    const cohort = (await u.last24hCohort()).map((c) => c.session_id).sort();
    expect(cohort).toEqual(['c1', 'k1', 'old-ended-today', 'x1']);
    const main = join(dir, 's1.jsonl');
    writeLines(main, [claudeAssistant('m1', { input: 1_000_000, output: 0 })]);
    await foldClaude(main);
    expect(await u.machinesUsage()).toEqual([
      // one 1M-input Sonnet 4.5 request: above the 200k tier, $6/MTok in the shipped genai-prices revision
      // m1: one of its three sessions was folded, so the sum covers only that one (partial)
      {
        machine_id: 'm1',
        '24H TOKENS': 1_000_000,
        '24H API COST': 6,
        '24H SESSIONS': 3,
        cost_status: 'partial',
        usage_status: 'partial',
        measured_sessions: 1,
        // U12: the partial cost is named
        cost_caveat: '2 of 3 sessions have no cost (2 not measured)',
      },
      // m2: nothing folded, so nothing measured (U10: never a fabricated zero)
      {
        machine_id: 'm2',
        '24H TOKENS': null,
        '24H API COST': null,
        '24H SESSIONS': 1,
        cost_status: 'unavailable',
        usage_status: 'unavailable',
        measured_sessions: 0,
        cost_caveat: null,
      },
    ]);
  });

  test('U2 registration keeps requested facts apart from served ones, which stay unattested', async () => {
    const s = sessionActivities({ db: t.db });
    const r = await s.registerSession({
      sessionId: 'req',
      actorId: 'a',
      harness: 'claude',
      requestedModel: 'claude-opus-4-6',
      requestedWindow: 1_000_000,
    });
    expect(r.session.requested).toEqual({ model: 'claude-opus-4-6', effort: null, window: 1_000_000 });
    expect(r.session.served).toEqual({ model: null, effort: null, window: null, attested_at: null });
  });
});
