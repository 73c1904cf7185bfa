import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertRegularArtifacts } from '../../activities/usage/artifactFile';
import { readBudget, scanLines, type ScannedLine } from '../../activities/usage/lineStream';
import type { YokeError } from '../../domain/errors';

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

  test('a fold is bounded: a scan stops at its last whole line once its byte budget is spent, says why, and the next scan reads on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'yoke-lines-'));
    try {
      const file = join(dir, 'a.jsonl');
      const row = (n: number) => `{"row":${n},"pad":"${'x'.repeat(16)}"}\n`;
      writeFileSync(file, row(1) + row(2) + row(3) + row(4));
      const budget = readBudget(10, 60_000);
      const first: string[] = [];
      const watermark = await scanLines(file, 0, { maxLineBytes: 64, budget }, (l) => {
        if (l.kind === 'line') first.push(l.bytes.toString());
      });
      expect(first.length).toBeLessThan(4);
      expect(watermark).toBe(first.length * row(1).length);
      expect(budget.stopped).toMatch(/limit of 10 bytes/);
      const rest: string[] = [];
      await scanLines(file, watermark, 64, (l) => l.kind === 'line' && rest.push(l.bytes.toString()));
      expect(first.length + rest.length).toBe(4);

      const late = readBudget(1 << 20, -1); // its time is already up: nothing is read
      expect(await scanLines(file, 0, { maxLineBytes: 64, budget: late }, () => undefined)).toBe(0);
      expect(late.stopped).toMatch(/time limit/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('only regular files are read: a FIFO, a directory and /dev/zero are refused artifact_not_regular_file at once, never read', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'yoke-lines-'));
    try {
      const fifo = join(dir, 'pipe');
      execFileSync('mkfifo', [fifo]);
      mkdirSync(join(dir, 'sub'));
      for (const [path, kind] of [
        [fifo, 'FIFO'],
        [join(dir, 'sub'), 'directory'],
        ['/dev/zero', 'character device'],
      ] as const) {
        let refused: YokeError | undefined;
        try {
          assertRegularArtifacts([path]);
        } catch (err) {
          refused = err as YokeError;
        }
        expect(refused).toMatchObject({ code: 'artifact_not_regular_file', kind: 'usage' });
        expect(refused!.message).toContain(kind);
        // the reader itself refuses too (a path swapped after the check), without blocking on the FIFO
        await expect(scanLines(path, 0, 64, () => undefined)).rejects.toMatchObject({
          code: 'artifact_not_regular_file',
        });
      }
      expect(() => assertRegularArtifacts([join(dir, 'not-yet')])).not.toThrow(); // no source yet: unavailable, not a mistake
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  test('U9 scans running at once on one thread each read their own file whole, and so do the scans after them (read buffers are handed on only when a scan ends)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'yoke-lines-'));
    try {
      // past 16 reads of 1 MB a scan lets the event loop run, so two scans interleave
      const lines = 36_000;
      const write = (name: string) => {
        const path = join(dir, name);
        const rows = Array.from({ length: lines }, (_, i) => `${name}:${i}:${'z'.repeat(500)}`);
        writeFileSync(path, `${rows.join('\n')}\n`);
        return path;
      };
      const read = async (path: string, name: string) => {
        let wrong = 0;
        let seen = 0;
        await scanLines(path, 0, 1 << 20, (line) => {
          if (line.kind !== 'line' || !line.bytes.toString('latin1').startsWith(`${name}:${seen}:`)) wrong++;
          seen++;
        });
        return { wrong, seen };
      };
      const [a, b, c] = [write('a'), write('b'), write('c')];
      const together = await Promise.all([read(a, 'a'), read(b, 'b')]);
      const after = await read(c, 'c');
      for (const r of [...together, after]) expect(r).toEqual({ wrong: 0, seen: lines });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
