import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { projectRoot } from '../../config/yokeConfig';
import { totalTokens } from '../../domain/usage/buckets';
import { fold } from '../../activities/usage/readers';
import { claudeAssistant, fixtureDir } from '../helpers/usageFixtures';

/**
 * The fold pool as a backfill runs it: the compiled pool (its worker threads exist only in
 * dist/), in a process of its own, folding many transcripts on two threads.
 */
const SESSIONS = 96;
const ROWS_PER_SESSION = 400; // about 1 MB a transcript

function writeCorpus(dir: string): string[] {
  const filler = JSON.stringify({ type: 'user', message: { role: 'user', content: 'lorem '.repeat(400) } });
  return Array.from({ length: SESSIONS }, (_, s) => {
    const rows: string[] = [];
    for (let r = 0; r < ROWS_PER_SESSION; r++) {
      rows.push(JSON.stringify(claudeAssistant(`m_${s}_${r}`, { input: 10 + r, cacheRead: 100, output: s + 1 })));
      rows.push(filler);
    }
    const path = join(dir, `s${s}.jsonl`);
    writeFileSync(path, `${rows.join('\n')}\n`);
    return path;
  });
}

const POOL_SCRIPT = `
const { foldPool, boundedEach } = require(process.argv[1]);
const { totalTokens } = require(process.argv[2]);
const paths = JSON.parse(process.argv[3]);
(async () => {
  const pool = foldPool({ threads: 2, bytes: Number(process.argv[4]) });
  let tokens = 0;
  await boundedEach(paths, pool.threads * 2, async (p) => {
    const reading = await pool.fold('claude', undefined, [p]);
    tokens += totalTokens(reading.totals);
  });
  const folds = pool.folds();
  await pool.close();
  process.stdout.write(JSON.stringify({ threads: pool.threads, folds, tokens }));
})();
`;

test('U9 issue 16: a backfill folds on every thread — the worker thread keeps getting sessions while the calling thread folds, and the totals are those of one thread', async () => {
  const dir = fixtureDir();
  try {
    const paths = writeCorpus(dir);
    let expected = 0;
    for (const p of paths) expected += totalTokens((await fold('claude', undefined, [p])).totals);
    const dist = join(projectRoot(), 'dist');
    const out = execFileSync(
      process.execPath,
      [
        '-e',
        POOL_SCRIPT,
        join(dist, 'activities', 'usage', 'foldPool.js'),
        join(dist, 'domain', 'usage', 'buckets.js'),
        JSON.stringify(paths),
        String(SESSIONS << 20),
      ],
      { encoding: 'utf8' },
    );
    const result = JSON.parse(out) as { threads: number; folds: number[]; tokens: number };
    expect(result.threads).toBe(2);
    expect(result.folds.reduce((a, b) => a + b, 0)).toBe(SESSIONS);
    // The calling thread's folds never gave its event loop a turn, so the worker's first two
    // finished folds waited there until the caller ran out of work: the worker folded 2 in all.
    expect(result.folds[1]).toBeGreaterThan(2);
    expect(result.tokens).toBe(expected);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
