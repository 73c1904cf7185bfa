import { appendFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fold } from '../../activities/usage/readers';
import { claudeAssistant, codexMeta, codexTokens, codexTurn, fixtureDir, writeLines } from '../helpers/usageFixtures';

/**
 * U9 U10: a token count is a non-negative integer within 2^53-1. A relevant row holding any
 * other value is an unreadable statement: none of its counts is added, and the reading names it.
 */
const model = 'claude-sonnet-4-5-20250929';
const zero = { input: 0, cached_input: 0, cache_write: 0, cache_write_long: 0, output: 0, reasoning: 0 };
const INVALID = /with invalid token counts \(not a non-negative integer\), not counted/;

/** A Claude assistant row with message.usage spelled as raw JSON (JSON.stringify would round 9007199254740993). */
const claudeRaw = (id: string, usage: string) =>
  `{"type":"assistant","requestId":"req_${id}","message":{"id":"${id}","model":"${model}","role":"assistant","usage":${usage}}}\n`;

const badUsages = [
  '{"input_tokens":1e300,"output_tokens":5}',
  '{"input_tokens":-5000,"output_tokens":5}',
  '{"input_tokens":"12","output_tokens":5}',
  '{"input_tokens":9007199254740993,"output_tokens":5}',
  '{"input_tokens":1.5,"output_tokens":5}',
  '{"input_tokens":1,"output_tokens":true}',
  '{"input_tokens":1,"cache_read_input_tokens":{"n":1},"output_tokens":5}',
  '{"input_tokens":1,"cache_creation":{"ephemeral_1h_input_tokens":-3},"output_tokens":5}',
  '{"input_tokens":1,"output_tokens":5,"output_tokens_details":{"thinking_tokens":1e300}}',
  '"lots"',
  '[1,2]',
];

/** Each Claude row reader in turn: the whole parse (a cold thread) and the byte reader. */
async function byEachReader(run: (reader: string) => Promise<void>): Promise<void> {
  try {
    for (const [reader, after] of Object.entries({ parsed: String(2 ** 40), bytes: '0' })) {
      process.env.YOKE_BYTE_READER_AFTER_BYTES = after;
      await run(reader);
    }
  } finally {
    delete process.env.YOKE_BYTE_READER_AFTER_BYTES;
  }
}

describe('U9 U10 invalid token counts', () => {
  test('U9 Claude: a row with a count of 1e300, -5000, "12", 2^53+1, 1.5, true, an object (or a usage that is no object) adds none of its counts; the reading is partial and names the rows, by either row reader', async () => {
    await byEachReader(async (reader) => {
      const dir = fixtureDir();
      const main = join(dir, 'h1.jsonl');
      writeFileSync(
        main,
        JSON.stringify(claudeAssistant('ok', { input: 10, output: 5 })) +
          '\n' +
          badUsages.map((usage, i) => claudeRaw(`bad${i}`, usage)).join(''),
      );
      const r = await fold('claude', undefined, [main]);
      expect({ reader, totals: r.totals }).toEqual({
        reader,
        totals: { [model]: { all: { ...zero, input: 10, output: 5 }, above_200k: zero } },
      });
      expect(r.measured).toBe(true);
      expect({ reader, reasons: r.reasons }).toEqual({
        reader,
        reasons: [
          `${badUsages.length} assistant rows in h1.jsonl with invalid token counts (not a non-negative integer), not counted; the last ended at byte ${statSync(main).size}`,
        ],
      });
    });
  });

  test('U9 Claude: the repro row alone (input_tokens 1e300) measures nothing: no 1e300, no zero, and the reason names it', async () => {
    await byEachReader(async () => {
      const main = join(fixtureDir(), 'h1.jsonl');
      writeFileSync(
        main,
        '{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","usage":{"input_tokens":1e300,"output_tokens":5}}}\n',
      );
      const r = await fold('claude', undefined, [main]);
      expect(r.measured).toBe(false);
      expect(r.totals).toEqual({});
      expect(r.reasons).toEqual([expect.stringMatching(/^1 assistant row in h1\.jsonl with invalid token counts/)]);
    });
  });

  test('U9 Claude: valid edges still count (0, null or absent as 0, 2^53-1, 1e3); invalid rows are counted across incremental folds and a streaming snapshot with an invalid count never replaces its call', async () => {
    await byEachReader(async (reader) => {
      const main = join(fixtureDir(), 'h1.jsonl');
      writeFileSync(
        main,
        claudeRaw('a', '{"input_tokens":9007199254740991,"output_tokens":0}') +
          claudeRaw('b', '{"input_tokens":null,"output_tokens":1e3,"cache_creation":null}') +
          claudeRaw('c', '{"output_tokens":7}'),
      );
      const first = await fold('claude', undefined, [main]);
      expect(first.reasons).toEqual([]);
      expect(first.totals[model]!.all).toEqual({ ...zero, input: Number.MAX_SAFE_INTEGER, output: 1007 });
      appendFileSync(main, claudeRaw('c', '{"output_tokens":-70}') + claudeRaw('d', '{"output_tokens":"3"}'));
      const second = await fold('claude', first.checkpoint, [main]);
      expect({ reader, output: second.totals[model]!.all.output }).toEqual({ reader, output: 1007 });
      expect(second.reasons).toEqual([
        expect.stringMatching(/^2 assistant rows in h1\.jsonl with invalid token counts/),
      ]);
      appendFileSync(main, claudeRaw('e', '{"output_tokens":1.25}'));
      const third = await fold('claude', second.checkpoint, [main]);
      expect(third.reasons).toEqual([
        `3 assistant rows in h1.jsonl with invalid token counts (not a non-negative integer), not counted; the last ended at byte ${statSync(main).size}`,
      ]);
      // a repeated fold of the same bytes counts no row twice
      expect((await fold('claude', third.checkpoint, [main])).reasons).toEqual(third.reasons);
    });
  });

  test('U9 Codex: an invalid cumulative total is not read (the thread keeps its last readable total) and marks partial until a later total supersedes it', async () => {
    const main = join(fixtureDir(), 'rollout-2026-11-29T10-00-00-aaaaaaaa-0000-0000-0000-000000000001.jsonl');
    writeLines(main, [
      codexMeta('aaaaaaaa-0000-0000-0000-000000000001', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex'),
      codexTokens('2026-11-29T10:00:02Z', { input: 1000, cached: 400, output: 300, reasoning: 100 }),
      codexTokens('2026-11-29T10:00:03Z', { input: 1e300, cached: 400, output: 300, reasoning: 100 }),
    ]);
    const r = await fold('codex', undefined, [main]);
    expect(r.measured).toBe(true);
    expect(r.totals['gpt-5-codex']!.all).toEqual({
      ...zero,
      input: 600,
      cached_input: 400,
      output: 300,
      reasoning: 100,
    });
    expect(r.reasons).toEqual([
      expect.stringMatching(/^1 token_count row in rollout-.*\.jsonl with invalid token counts/),
    ]);
    for (const bad of [-5, 2.5, 2 ** 53 + 2])
      writeLines(
        main,
        [codexTokens('2026-11-29T10:00:04Z', { input: 2000, cached: 0, output: bad, reasoning: 0 })],
        true,
      );
    appendFileSync(
      main,
      `${JSON.stringify(codexTokens('2026-11-29T10:00:05Z', { input: 2000, cached: 0, output: 0, reasoning: 0 })).replace('"output_tokens":0', '"output_tokens":"12"')}\n`,
    );
    const more = await fold('codex', r.checkpoint, [main]);
    expect(more.totals['gpt-5-codex']!.all.input).toBe(600);
    expect(more.reasons).toEqual([
      expect.stringMatching(/^5 token_count rows in rollout-.*\.jsonl with invalid token counts/),
    ]);
    writeLines(
      main,
      [codexTokens('2026-11-29T10:00:06Z', { input: 3000, cached: 1000, output: 500, reasoning: 0 })],
      true,
    );
    const superseded = await fold('codex', more.checkpoint, [main]);
    expect(superseded.totals['gpt-5-codex']!.all).toEqual({ ...zero, input: 2000, cached_input: 1000, output: 500 });
    expect(superseded.reasons).toEqual([]);
    // a thread whose only total is invalid measures nothing
    const only = join(fixtureDir(), 'rollout-2026-11-29T10-00-00-cccccccc-0000-0000-0000-000000000003.jsonl');
    writeLines(only, [
      codexMeta('cccccccc-0000-0000-0000-000000000003', '2026-11-29T10:00:00Z'),
      codexTurn('gpt-5-codex'),
      codexTokens('2026-11-29T10:00:02Z', { input: -1000, cached: 0, output: 3, reasoning: 0 }),
    ]);
    const none = await fold('codex', undefined, [only]);
    expect(none.measured).toBe(false);
    expect(none.reasons).toEqual([expect.stringMatching(INVALID)]);
  });

  test('U9 Cursor: a print-mode result or a stop payload with an invalid token field is not counted and marks partial; re-reading the capture does not count it twice', async () => {
    const dir = fixtureDir();
    const hooks = join(dir, 'hooks.jsonl');
    const stop = (generation: string, fields: object) => ({
      hook_event_name: 'stop',
      conversation_id: 'c',
      generation_id: generation,
      model: 'gpt-5',
      status: 'completed',
      loop_count: 0,
      ...fields,
    });
    writeLines(hooks, [
      stop('g1', { input_tokens: 100, output_tokens: 20 }),
      stop('g2', { input_tokens: 1e300, output_tokens: 20 }),
      stop('g3', { input_tokens: 100, output_tokens: '12' }),
      stop('g4', { input_tokens: 100, cache_read_tokens: -5 }),
      stop('g5', { input_tokens: null, output_tokens: 9 }),
    ]);
    const result = join(dir, 'result.json');
    writeFileSync(
      result,
      JSON.stringify({ type: 'result', request_id: 'r1', usage: { inputTokens: 50, outputTokens: 0.5 } }),
    );
    const r = await fold('cursor', undefined, [hooks, result]);
    expect(r.measured).toBe(true);
    expect(r.totals['gpt-5']!.all).toEqual({ ...zero, input: 100, output: 29 });
    expect(r.totals['cursor-agent']).toBeUndefined();
    expect(r.reasons).toEqual([
      expect.stringMatching(/^3 records in hooks\.jsonl with invalid token counts/),
      expect.stringMatching(/^1 record in result\.json with invalid token counts/),
    ]);
    writeLines(hooks, [stop('g6', { input_tokens: 1, output_tokens: 1 })], true);
    const again = await fold('cursor', r.checkpoint, [hooks, result]);
    expect(again.totals['gpt-5']!.all).toEqual({ ...zero, input: 101, output: 30 });
    expect(again.reasons).toEqual(r.reasons);
    writeFileSync(
      result,
      JSON.stringify({ type: 'result', request_id: 'r1', usage: { inputTokens: 50, outputTokens: 5 } }),
    );
    const rewritten = await fold('cursor', again.checkpoint, [hooks, result]);
    expect(rewritten.totals['cursor-agent']!.all).toEqual({ ...zero, input: 50, output: 5 });
    expect(rewritten.reasons).toEqual([expect.stringMatching(/^3 records in hooks\.jsonl/)]);
  });
});
