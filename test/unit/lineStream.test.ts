import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { scanLines, type ScannedLine } from '../../activities/usage/lineStream';

async function scan(text: string, from = 0, max = 64) {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-lines-'));
  try {
    const file = join(dir, 'a.jsonl');
    writeFileSync(file, text);
    const seen: { kind: ScannedLine['kind']; end: number; text?: string; prefix?: string; bytes?: number }[] = [];
    const next = await scanLines(file, from, max, (line) =>
      seen.push(
        line.kind === 'line'
          ? { kind: 'line', text: line.bytes.toString('utf8'), end: line.end }
          : { kind: 'oversized', prefix: line.prefix.slice(0, 3), bytes: line.bytes, end: line.end },
      ),
    );
    return { seen, next };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('line stream', () => {
  test('U9 lines come with their end offsets; an unfinished last line is left for the next fold', async () => {
    const { seen, next } = await scan('{"a":1}\n\n{"b":2}\n{"c":');
    expect(seen).toEqual([
      { kind: 'line', text: '{"a":1}', end: 8 },
      { kind: 'line', text: '{"b":2}', end: 17 },
    ]);
    expect(next).toBe(17); // the blank line is passed too, the partial row is not
  });

  test('U9 a fold resumes from a watermark', async () => {
    const { seen, next } = await scan('{"a":1}\n{"b":2}\n', 8);
    expect(seen).toEqual([{ kind: 'line', text: '{"b":2}', end: 16 }]);
    expect(next).toBe(16);
  });

  test('U9 an oversized line is skipped with its size and first bytes, never held; the lines around it still count', async () => {
    const big = `abc${'x'.repeat(5_000_000)}`;
    const { seen, next } = await scan(`{"a":1}\n${big}\n{"b":2}\n`, 0, 1_000_000);
    expect(seen).toEqual([
      { kind: 'line', text: '{"a":1}', end: 8 },
      { kind: 'oversized', prefix: 'abc', bytes: big.length, end: 8 + big.length + 1 },
      { kind: 'line', text: '{"b":2}', end: 8 + big.length + 9 },
    ]);
    expect(next).toBe(8 + big.length + 9);
  });

  test('U9 a line longer than one read buffer but inside the bound is read whole', async () => {
    const long = `{"t":"${'y'.repeat(3_000_000)}"}`;
    const { seen } = await scan(`${long}\n{"b":2}\n`, 0, 8_000_000);
    expect(seen.map((l) => (l.kind === 'line' ? l.text!.length : -1))).toEqual([long.length, 7]);
  });
});
