import {
  closeSync,
  constants,
  existsSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { totalTokens } from '../domain/usage/buckets';
import { boundedEach, foldPool } from '../activities/usage/foldPool';
import { claudeArtifacts, unreadBytes, type Checkpoint } from '../activities/usage/readers';
import { runBench } from './benchMain';

/**
 * One fold pass of bench/usage over a Claude config dir (projects/<project>/<session>.jsonl
 * with subagents), run as its own process so its peak RSS is measured alone.
 * Sessions are folded on the fold pool (one worker thread per core), as a backfill folds them.
 * Each session's checkpoint is its own file, as each is its own row in Postgres: a fold loads
 * only its session's accumulators, so memory follows one session, not the corpus.
 * `floor` is no fold: the least an incremental fold of this design does in a fresh process, timed the same
 * way for comparison. Per session it reads the checkpoint, stats the transcripts, reads the
 * main transcript past its mark, parses each new row (JSON.parse, nothing counted) and writes
 * the checkpoint back with the mark moved; the checkpoint directory it is given is its own copy.
 * `warm` is the worker's case (`hooks usage --async` hands folds to a long-lived process): a full
 * pass, then, once a line arrives on stdin (the bench has appended), an incremental pass in the
 * same process, its code already optimized by the first; one JSON line each.
 * Usage: node usageFold.js <claude-config-dir> <checkpoint-dir> full|incremental|floor|warm
 */
async function main(): Promise<void> {
  const [root, checkpointDir, mode] = process.argv.slice(2);
  if (!root || !checkpointDir || !mode || !['full', 'incremental', 'floor', 'warm'].includes(mode))
    throw new Error('usage: usageFold <claude-config-dir> <checkpoint-dir> full|incremental|floor|warm');
  mkdirSync(checkpointDir, { recursive: true });
  const projects = join(root, 'projects');
  const sessions = readdirSync(projects).flatMap((project) =>
    readdirSync(join(projects, project))
      .filter((f) => f.endsWith('.jsonl'))
      .map((file) => ({
        main: join(projects, project, file),
        checkpointFile: join(checkpointDir, `${project}-${file}.json`),
      })),
  );
  if (mode === 'floor') return floor(sessions, process.hrtime.bigint(), process.cpuUsage());
  if (mode !== 'warm') return foldPass(sessions, mode === 'incremental', projects);
  // the worker's case: a process that has folded before folds again after the append, warm
  await foldPass(sessions, false, projects);
  await nextLine(); // the bench appends, then writes a line
  await foldPass(sessions, true, projects);
}

/** Resolves when stdin brings a line (or ends). */
function nextLine(): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      process.stdin.off('data', onData);
      process.stdin.off('end', done);
      process.stdin.destroy(); // nothing more is read: the process may exit when its pass ends
      resolve();
    };
    const onData = (chunk: Buffer) => {
      if (chunk.includes(10)) done();
    };
    process.stdin.on('data', onData);
    process.stdin.on('end', done);
  });
}

/** One fold of every session (from its checkpoint when `incremental`), timed and reported as one JSON line. */
async function foldPass(
  sessions: { main: string; checkpointFile: string }[],
  incremental: boolean,
  projects: string,
): Promise<void> {
  let files = 0;
  const started = process.hrtime.bigint();
  const cpuBefore = process.cpuUsage();
  let tokens = 0;
  let bytesRead = 0;
  let checkpointNs = 0n; // reading, serializing and writing checkpoints: the store's share of the fold time
  const checkpoints = new Map<string, Checkpoint | undefined>();
  let unread = 0;
  for (const { main, checkpointFile } of sessions) {
    const loading = process.hrtime.bigint();
    const before: Checkpoint | undefined =
      incremental && existsSync(checkpointFile) ? JSON.parse(readFileSync(checkpointFile, 'utf8')) : undefined;
    checkpointNs += process.hrtime.bigint() - loading;
    checkpoints.set(main, before);
    unread += unreadBytes(main, before);
  }
  const pool = foldPool({
    bytes: unread,
    threads: process.env.BENCH_USAGE_THREADS ? Number(process.env.BENCH_USAGE_THREADS) : undefined,
  });
  try {
    await boundedEach(sessions, pool.threads * 2, async ({ main, checkpointFile }) => {
      const before = checkpoints.get(main);
      checkpoints.delete(main);
      const offsetBefore = new Map(Object.entries(before?.files ?? {}).map(([path, mark]) => [path, mark.offset]));
      const reading = await pool.fold('claude', before, [main]); // takes `before` over
      for (const [path, mark] of Object.entries(reading.checkpoint.files))
        bytesRead += mark.offset - (offsetBefore.get(path) ?? 0);
      tokens += totalTokens(reading.totals);
      const storing = process.hrtime.bigint();
      store(checkpointFile, JSON.stringify(reading.checkpoint));
      checkpointNs += process.hrtime.bigint() - storing;
      files++;
    });
  } finally {
    await pool.close();
  }
  report(started, cpuBefore, () => ({
    checkpoint_seconds: Number(checkpointNs) / 1e9,
    tokens,
    bytes_read: bytesRead,
    files,
    threads: pool.threads,
    folds_per_thread: pool.folds(),
    corpus_bytes: corpusBytes(projects),
  }));
}

/**
 * One JSON line: the pass's wall and CPU seconds (every thread of the process), then its own
 * figures, worked out after the clock stops: the corpus's size (a walk of every file, 10-25 ms,
 * 10 % of an incremental fold) is the bench's question, not the fold's work.
 */
function report(started: bigint, cpuBefore: NodeJS.CpuUsage, figures: () => Record<string, number | number[]>): void {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const cpu = process.cpuUsage(cpuBefore); // comparable on a shared machine
  process.stdout.write(`${JSON.stringify({ seconds, cpu_seconds: (cpu.user + cpu.system) / 1e6, ...figures() })}\n`);
}

/** The `floor` pass (see above): prints its time, the rows it parsed, and the parse's and the checkpoints' shares. */
function floor(
  sessions: { main: string; checkpointFile: string }[],
  started: bigint,
  cpuBefore: NodeJS.CpuUsage,
): void {
  let rows = 0;
  let bytesRead = 0;
  let parseNs = 0n;
  let checkpointNs = 0n;
  for (const { main, checkpointFile } of sessions) {
    const loading = process.hrtime.bigint();
    const checkpoint = JSON.parse(readFileSync(checkpointFile, 'utf8')) as Checkpoint;
    checkpointNs += process.hrtime.bigint() - loading;
    for (const path of claudeArtifacts(main)) if (path !== main) statSync(path); // new subagent files are looked for
    const mark = checkpoint.files[main]!;
    const size = statSync(main).size;
    const bytes = Buffer.allocUnsafe(size - mark.offset);
    const fd = openSync(main, 'r');
    try {
      bytesRead += readSync(fd, bytes, 0, bytes.length, mark.offset);
    } finally {
      closeSync(fd);
    }
    const parsing = process.hrtime.bigint();
    const text = bytes.toString('utf8');
    for (let start = 0, nl = text.indexOf('\n'); nl >= 0; start = nl + 1, nl = text.indexOf('\n', start)) {
      JSON.parse(text.slice(start, nl));
      rows++;
    }
    parseNs += process.hrtime.bigint() - parsing;
    checkpoint.files[main] = { ...mark, offset: size, size };
    const storing = process.hrtime.bigint();
    store(checkpointFile, JSON.stringify(checkpoint));
    checkpointNs += process.hrtime.bigint() - storing;
  }
  report(started, cpuBefore, () => ({
    rows,
    bytes_read: bytesRead,
    parse_seconds: Number(parseNs) / 1e9,
    checkpoint_seconds: Number(checkpointNs) / 1e9,
  }));
}

/**
 * A session's checkpoint file rewritten in place (written over, then cut to length), as
 * Postgres rewrites its row. Not truncated to zero first: ext4 (auto_da_alloc) starts
 * writeback when a file truncated to zero is closed, which cost the incremental pass, the
 * only one that rewrites existing files, 50-300 ms of waiting on the disk for 200 files.
 */
function store(path: string, text: string): void {
  const bytes = Buffer.from(text);
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT);
  try {
    writeSync(fd, bytes, 0, bytes.length, 0);
    ftruncateSync(fd, bytes.length);
  } finally {
    closeSync(fd);
  }
}

function corpusBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    total += entry.isDirectory() ? corpusBytes(path) : statSync(path).size;
  }
  return total;
}

runBench(main);
