import { readClaudeRow, type ClaudeRowFields } from '../../activities/usage/claudeRow';
import { claudeAssistant, claudeProgress, claudeUser } from '../helpers/usageFixtures';

/** What the reader takes from a row parsed whole (readers.ts' slow path, spelled out). */
function parsedFields(text: string): Omit<ClaudeRowFields, 'usage'> & { usage?: Record<string, number> } {
  const row = JSON.parse(text) as {
    type?: unknown;
    requestId?: unknown;
    message?: { id?: unknown; model?: unknown; usage?: Record<string, unknown> };
  };
  // U9 U10: absent or null is 0; a count that is not a non-negative integer within 2^53-1 makes the usage invalid
  const n = (v: unknown) =>
    v === undefined || v === null ? 0 : typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : NaN;
  const m = row?.message;
  const key = m?.id ?? (typeof row?.requestId === 'string' ? row.requestId : undefined);
  const u = m?.usage;
  const creation = (u?.cache_creation ?? {}) as Record<string, unknown>;
  const details = (u?.output_tokens_details ?? {}) as Record<string, unknown>;
  const counts =
    u && typeof u === 'object' && !Array.isArray(u)
      ? {
          input: n(u.input_tokens),
          cacheRead: n(u.cache_read_input_tokens),
          cacheCreation: n(u.cache_creation_input_tokens),
          write5m: n(creation.ephemeral_5m_input_tokens),
          write1h: n(creation.ephemeral_1h_input_tokens),
          output: n(u.output_tokens),
          thinking: n(details.thinking_tokens),
        }
      : undefined;
  const valid = counts && Object.values(counts).every((c) => !Number.isNaN(c)) ? counts : undefined;
  return {
    assistant: row?.type === 'assistant',
    key: key === undefined || key === null ? undefined : String(key),
    model: m?.model === undefined || m.model === null ? undefined : String(m.model),
    usage: valid,
    invalid: !!u && !valid,
  };
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** The byte reader either defers (undefined) or agrees with the whole parse; it never reads what JSON.parse refuses. */
function agrees(text: string): 'fast' | 'deferred' {
  const fast = readClaudeRow(Buffer.from(text, 'utf8'));
  if (!fast) return 'deferred';
  expect(parses(text)).toBe(true);
  expect({ ...fast, usage: fast.usage && { ...fast.usage } }).toEqual(parsedFields(text));
  return 'fast';
}

const assistant = JSON.stringify(
  claudeAssistant('msg_1', {
    input: 10,
    cacheRead: 20,
    cacheCreate: 700,
    write5m: 200,
    write1h: 400,
    output: 5,
    thinking: 3,
  }),
);

describe('U9 the Claude row byte reader agrees with a whole parse', () => {
  test('U9 the documented row shapes are read on the fast path, fields as parsed', () => {
    for (const row of [
      assistant,
      JSON.stringify(claudeAssistant('m2', { input: 1, output: 1 }, { model: '<synthetic>' })),
      JSON.stringify(claudeProgress(claudeAssistant('sub1', { input: 5, output: 7 }).message)),
      JSON.stringify(claudeUser({ input_tokens: 999, output_tokens: 999 })),
      JSON.stringify({ type: 'assistant', requestId: 'req_only', message: { model: 'm', usage: {} } }),
      ` { "type" : "assistant" , "message" : { "id" : "a\\"b" , "model" : "caf\\u00e9", "usage" : { "input_tokens" : 1500 , "output_tokens" : 0 } } } `,
      JSON.stringify({ type: 'assistant', message: { id: 'x', usage: { input_tokens: 1 } }, requestId: 'r' }),
      JSON.stringify({ message: { id: 'x', usage: { input_tokens: 1 } }, type: 'assistant' }),
      '{"type":"assistant","message":{"id":"x","usage":{"cache_creation":{"ephemeral_5m_input_tokens":9},"cache_creation":null,"input_tokens":null}}}',
      '{"type":"assistant","message":{"id":"x","usage":{"cache_creation":"none","output_tokens_details":[{"thinking_tokens":-1}],"output_tokens":7}}}',
      '{"type":"assistant","message":{"id":"x","usage":{"input_tokens":1}},"message":"gone"}',
      '{"type":"assistant","message":{"id":null,"model":null,"usage":{"input_tokens":9007199254740991,"output_tokens":1234567890123456}},"requestId":"r"}',
      '{"type":"assistant","message":{"id":"x","usage":null}}',
      '{"type":{"nested":"assistant"},"message":{"id":"x","usage":{"output_tokens":1}}}',
      '{"type":"assistant","message":["usage"],"requestId":"r"}',
      '{"type":"assistant","message":{"id":"ü→😀","usage":{"output_tokens_details":{"thinking_tokens":4},"output_tokens":9}}}',
      '[1,2,{"usage":3}]',
    ])
      expect(agrees(row)).toBe('fast');
  });

  test('U9 shapes the fast path does not cover are deferred to the whole parse', () => {
    for (const row of [
      '{"type":"assistant","message":{"id":5,"usage":{"input_tokens":1}}}',
      '{"type":"assistant","message":{"id":"x","model":["m"],"usage":{"input_tokens":1}}}',
      '{"type":"assistant","message":{"id":"x","usage":"yes"}}',
      '{"type":"assistant","message":{"id":"x","usage":[1]}}',
      '{"type":"assistant","message":{"id":"x","\\u0075sage":{"input_tokens":1}}}',
      `${'['.repeat(100)}${']'.repeat(100)}`,
    ])
      expect(agrees(row)).toBe('deferred');
  });

  test('U9 U10 a token count that is not a non-negative integer within 2^53-1 is never read as a count on the fast path: the whole parse marks the row invalid', () => {
    const row = (count: string, where = 'input_tokens') =>
      where === 'thinking_tokens'
        ? `{"type":"assistant","message":{"id":"x","usage":{"output_tokens":5,"output_tokens_details":{"thinking_tokens":${count}}}}}`
        : where === 'ephemeral_1h_input_tokens'
          ? `{"type":"assistant","message":{"id":"x","usage":{"output_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":${count}}}}}`
          : `{"type":"assistant","message":{"id":"x","model":"claude-sonnet-4-5","usage":{"${where}":${count},"${where === 'output_tokens' ? 'input_tokens' : 'output_tokens'}":5}}}`;
    for (const bad of [
      '1e300',
      '1e999',
      '-5000',
      '-1',
      '"12"',
      '1.5',
      '9007199254740992',
      '9007199254740993',
      '12345678901234567890',
      'true',
      'false',
      '{}',
      '[3]',
    ])
      for (const where of [
        'input_tokens',
        'cache_read_input_tokens',
        'cache_creation_input_tokens',
        'output_tokens',
        'ephemeral_1h_input_tokens',
        'thinking_tokens',
      ]) {
        const text = row(bad, where);
        expect({ text, read: agrees(text) }).toEqual({ text, read: 'deferred' });
        expect({ text, parsed: parsedFields(text) }).toMatchObject({
          text,
          parsed: { usage: undefined, invalid: true },
        });
      }
    // the valid edges stay on the fast path; null is absent (0); 1e3 and -0 are integers the whole parse reads
    for (const good of ['0', '9007199254740991', 'null']) expect(agrees(row(good))).toBe('fast');
    expect(readClaudeRow(Buffer.from(row('9007199254740991')))?.usage?.input).toBe(Number.MAX_SAFE_INTEGER);
    for (const deferred of ['1e3', '-0', '10.0']) {
      expect(agrees(row(deferred))).toBe('deferred');
      expect(parsedFields(row(deferred)).invalid).toBe(false);
    }
  });

  test('U9 rows JSON.parse refuses are never read on the fast path', () => {
    for (const row of [
      assistant.slice(0, 60),
      assistant.slice(0, -1),
      `${assistant}x`,
      `${assistant}{}`,
      assistant.replace('"hi"', '"h\u0001i"'),
      assistant.replace('"hi"', '"h\\qi"'),
      assistant.replace('"hi"', '"h\\u12g4"'),
      assistant.replace(':10,', ':010,'),
      assistant.replace(':10,', ':1.,'),
      assistant.replace(':10,', ':+1,'),
      assistant.replace('false', 'fals'),
      assistant.replace('"role"', 'role'),
      assistant.replace('},"output_tokens"', '},,"output_tokens"'),
      assistant.replace('[{', '[{]'),
      '{"type":"assistant","message":{"id":"broken","usage":{"input_tokens":',
    ]) {
      expect(parses(row)).toBe(false);
      expect(readClaudeRow(Buffer.from(row, 'utf8'))).toBeUndefined();
    }
  });

  test('U9 random damage to a row: the fast path refuses it or agrees with the whole parse', () => {
    let seed = 7;
    const rand = (k: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % k;
    const alphabet = '{}[]":,\\ 0123456789-eE.tnfu"';
    let fast = 0;
    for (let i = 0; i < 4000; i++) {
      const chars = [...assistant];
      for (let edits = 1 + rand(3); edits > 0; edits--) {
        const at = rand(chars.length);
        const what = rand(3);
        if (what === 0) chars.splice(at, 1);
        else if (what === 1) chars.splice(at, 0, alphabet[rand(alphabet.length)]!);
        else chars[at] = alphabet[rand(alphabet.length)]!;
      }
      if (agrees(chars.join('')) === 'fast') fast++;
    }
    expect(fast).toBeGreaterThan(0);
  });
});
