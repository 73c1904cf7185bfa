import { execFileSync, spawn } from 'node:child_process';
import {
  appendFileSync,
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { projectRoot } from '../config/yokeConfig';
import { withBenchDatabase } from './benchDatabase';
import { machine } from './stats';
import { runBench } from './benchMain';

/**
 * Usage readers against ccusage on one synthetic Claude corpus (default 512 MB across many
 * sessions, with subagents, streaming duplicates and large irrelevant rows), in one run:
 * full-fold throughput, peak RSS, and the cost of an incremental fold after appending 1%,
 * which ccusage can only answer by reading everything again. Prints one JSON object.
 */
const TARGET_MB = Number(process.env.BENCH_USAGE_MB ?? 512);
const SESSIONS = Number(process.env.BENCH_USAGE_SESSIONS ?? 200);
const root = projectRoot();
const round3 = (x: number) => Math.round(x * 1000) / 1000;

let seed = 42;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
const models = ['claude-sonnet-4-5-20250929', 'claude-opus-4-6', 'claude-sonnet-4-20250514'];

/** One API call's row; its streaming snapshots share every count but output (as Claude writes them). */
function assistant(
  id: string,
  output: number,
  session: string,
  counts = {
    input: Math.floor(rand() * 5000),
    cached: Math.floor(rand() * 50000),
    model: models[Math.floor(rand() * models.length)]!,
  },
): string {
  return JSON.stringify({
    type: 'assistant',
    requestId: `req_${id}`,
    isSidechain: false,
    timestamp: '2026-11-28T12:00:00.000Z',
    sessionId: session,
    uuid: id,
    message: {
      id,
      model: counts.model,
      role: 'assistant',
      content: [{ type: 'text', text: 'ok '.repeat(40) }],
      usage: {
        input_tokens: counts.input,
        cache_read_input_tokens: counts.cached,
        cache_creation_input_tokens: 1200,
        cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 200 },
        output_tokens: output,
      },
    },
  });
}

function user(session: string): string {
  return JSON.stringify({
    type: 'user',
    sessionId: session,
    timestamp: '2026-11-28T12:00:00.000Z',
    message: { role: 'user', content: 'lorem ipsum '.repeat(150) },
  });
}

/** Writes one session (main transcript + a subagent) of about `bytes`; returns its id. */
function writeSession(dir: string, index: number, bytes: number): void {
  const session = `session-${index}`;
  const mainFd = openSync(join(dir, `${session}.jsonl`), 'w');
  const sub = join(dir, session, 'subagents');
  mkdirSync(sub, { recursive: true });
  const subFd = openSync(join(sub, 'agent-1.jsonl'), 'w');
  let written = 0;
  let call = 0;
  let buffer: string[] = [];
  const flush = (fd: number) => {
    const text = buffer.join('\n') + '\n';
    writeSync(fd, text);
    written += Buffer.byteLength(text);
    buffer = [];
  };
  while (written < bytes) {
    const id = `msg_${index}_${call++}`;
    const fd = rand() < 0.15 ? subFd : mainFd;
    const counts = {
      input: Math.floor(rand() * 5000),
      cached: Math.floor(rand() * 50000),
      model: models[Math.floor(rand() * models.length)]!,
    };
    for (const output of [1, 1, 200 + Math.floor(rand() * 2000)]) buffer.push(assistant(id, output, session, counts)); // streaming snapshots
    buffer.push(user(session));
    if (rand() < 0.01)
      buffer.push(JSON.stringify({ type: 'file-history-snapshot', snapshot: { files: 'x'.repeat(200_000) } }));
    if (buffer.length > 200) flush(fd);
  }
  flush(mainFd);
  closeSync(mainFd);
  closeSync(subFd);
}

function timed(command: string, args: string[], env: NodeJS.ProcessEnv = process.env) {
  const rssFile = join(tmpdir(), `yoke-rss-${process.pid}-${Math.random().toString(36).slice(2)}`);
  const started = process.hrtime.bigint();
  const stdout = execFileSync('/usr/bin/time', ['-o', rssFile, '-f', '%M %U %S', command, ...args], {
    env,
    encoding: 'utf8',
    maxBuffer: 1 << 28,
  });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const [rssKb, user, system] = execFileSync('cat', [rssFile], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .pop()!
    .split(' ')
    .map(Number);
  rmSync(rssFile, { force: true });
  return {
    stdout,
    seconds: Math.round(seconds * 1000) / 1000,
    peak_rss_mb: Math.round(rssKb! / 1024),
    // the process's CPU time, every thread: on a shared machine a steadier measure of work than wall time
    cpu_seconds: round3(user! + system!),
  };
}

/**
 * ccusage is installed on demand, not as a devDependency: 20.0.24's optionalDependencies name
 * platform packages that were never published, so no lock file holding it satisfies `npm ci`.
 * (20.0.24 is the newest build with a linux-x64 native package; see DESIGN.md's pitfalls.)
 */
function ccusageBinary(): string {
  const dir = join(root, '.yoke', 'bench-tools');
  const bin = join(dir, 'node_modules', '.bin', 'ccusage');
  if (!existsSync(bin)) {
    mkdirSync(dir, { recursive: true });
    process.stderr.write('installing ccusage@20.0.24 for the comparison (once)\n');
    execFileSync(
      'npm',
      [
        'install',
        '--prefix',
        dir,
        '--no-save',
        '--no-package-lock',
        '--no-audit',
        '--no-fund',
        'ccusage@20.0.24',
        '@ccusage/ccusage-linux-x64@20.0.24',
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
  }
  return bin;
}

interface FoldLine {
  seconds: number;
  cpu_seconds: number;
  checkpoint_seconds: number;
  tokens: number;
  bytes_read: number;
}

/**
 * `usageFold.js warm` (the worker's case: a long-lived process that has folded before): `full()`
 * waits for its full pass's line; `incremental()` lets it go on (the bench has appended) and
 * waits for its incremental pass's line, which it times in the same, warm, process.
 */
function warmFold(args: string[]): { full(): Promise<FoldLine>; incremental(): Promise<FoldLine> } {
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines: string[] = [];
  let buffered = '';
  let exit: number | null | undefined;
  let wake = () => {};
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    buffered += d;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      lines.push(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
    }
    wake();
  });
  child.on('close', (code) => {
    exit = code;
    wake();
  });
  const line = (n: number) =>
    new Promise<FoldLine>((resolve, reject) => {
      wake = () => {
        if (lines.length >= n) resolve(JSON.parse(lines[n - 1]!) as FoldLine);
        else if (exit !== undefined) reject(new Error(`usageFold warm exited (${exit}) before its pass ${n}`));
      };
      wake();
    });
  return {
    full: () => line(1),
    incremental: () => {
      child.stdin.end('appended\n');
      return line(2);
    },
  };
}

async function main(): Promise<void> {
  const config = mkdtempSync(join(tmpdir(), 'yoke-bench-usage-'));
  try {
    const projects = join(config, 'projects');
    const perSession = (TARGET_MB * 1024 * 1024) / SESSIONS;
    for (let i = 0; i < SESSIONS; i++) {
      const dir = join(projects, `project-${i % 10}`);
      mkdirSync(dir, { recursive: true });
      writeSession(dir, i, perSession);
    }
    const checkpoints = join(config, 'checkpoints');
    const node = process.execPath;
    const fold = join(root, 'dist', 'bench', 'usageFold.js');
    const ccusage = ccusageBinary();
    const env = { ...process.env, CLAUDE_CONFIG_DIR: config };

    const yokeFull = timed(node, [fold, config, checkpoints, 'full']);
    const yokeFullResult = JSON.parse(yokeFull.stdout.trim());
    const ccFull = timed(ccusage, ['session', '--offline', '--json'], env);
    const ccFullTokens = (JSON.parse(ccFull.stdout) as { totals: { totalTokens: number } }).totals.totalTokens;
    // the user's path end to end: `yoke usage backfill` registers every transcript and folds it into
    // Postgres; after the 1 % append, the same command again (the incremental fold through Postgres)
    const backfillArgs = [
      join(root, 'bin', 'yoke'),
      'usage',
      'backfill',
      '--harness',
      'claude',
      '--dir',
      config,
      '--json',
    ];
    const { backfill, backfillAgain, yokeIncremental, floor, ccAgain, warmFull, warmIncremental } =
      await withBenchDatabase('usage_backfill', async ({ url }) => {
        const backfillEnv = { ...process.env, DATABASE_URL: url };
        const backfill = timed(node, backfillArgs, backfillEnv);
        // the worker's case: a process that folded the corpus folds the append, warm
        const warm = warmFold([fold, config, join(config, 'checkpoints-warm'), 'warm']);
        const warmFull = await warm.full();
        // append 1% of the corpus as new calls at the end of the main transcripts
        const appendBytes = Math.floor((yokeFullResult.corpus_bytes * 0.01) / SESSIONS);
        for (let i = 0; i < SESSIONS; i++) {
          let text = '';
          let call = 0;
          while (text.length < appendBytes) text += `${assistant(`late_${i}_${call++}`, 500, `session-${i}`)}\n`;
          appendFileSync(join(projects, `project-${i % 10}`, `session-${i}.jsonl`), text);
        }
        const warmIncremental = await warm.incremental();
        const floorCheckpoints = join(config, 'checkpoints-floor'); // the floor pass's own copy
        cpSync(checkpoints, floorCheckpoints, { recursive: true });
        const yokeIncremental = timed(node, [fold, config, checkpoints, 'incremental']);
        const floor = timed(node, [fold, config, floorCheckpoints, 'floor']);
        const backfillAgain = timed(node, backfillArgs, backfillEnv);
        const ccAgain = timed(ccusage, ['session', '--offline', '--json'], env);
        return { backfill, backfillAgain, yokeIncremental, floor, ccAgain, warmFull, warmIncremental };
      });
    const lastLine = (stdout: string) =>
      JSON.parse(stdout.trim().split('\n').pop()!) as { registered: number; usage_tokens: number; threads: number };
    const backfillDone = lastLine(backfill.stdout);
    const backfillAgainDone = lastLine(backfillAgain.stdout);
    const yokeIncrementalResult = JSON.parse(yokeIncremental.stdout.trim());
    const floorResult = JSON.parse(floor.stdout.trim()) as {
      seconds: number;
      cpu_seconds: number;
      rows: number;
      parse_seconds: number;
      checkpoint_seconds: number;
    };
    const ccAgainTokens = (JSON.parse(ccAgain.stdout) as { totals: { totalTokens: number } }).totals.totalTokens;

    const mb = yokeFullResult.corpus_bytes / (1024 * 1024);
    console.log(
      JSON.stringify(
        {
          benchmark: 'usage',
          corpus: { mb: Math.round(mb), sessions: SESSIONS, files: SESSIONS * 2, with_subagents: true },
          yoke: {
            full_fold: {
              seconds: yokeFull.seconds,
              mb_per_s: Math.round(mb / yokeFull.seconds),
              peak_rss_mb: yokeFull.peak_rss_mb,
              tokens: yokeFullResult.tokens,
              fold_seconds: round3(yokeFullResult.seconds),
              fold_cpu_seconds: round3(yokeFullResult.cpu_seconds),
              // of fold_seconds: reading, serializing and writing the sessions' checkpoints
              fold_checkpoint_seconds: round3(yokeFullResult.checkpoint_seconds),
              threads: yokeFullResult.threads,
              // sessions each thread folded, the calling thread's first
              folds_per_thread: yokeFullResult.folds_per_thread,
              cpu_seconds: yokeFull.cpu_seconds,
            },
            backfill: {
              seconds: backfill.seconds,
              mb_per_s: Math.round(mb / backfill.seconds),
              peak_rss_mb: backfill.peak_rss_mb,
              tokens: backfillDone.usage_tokens,
              registered: backfillDone.registered,
              threads: backfillDone.threads,
              cpu_seconds: backfill.cpu_seconds,
            },
            // the same command after the 1 % append: only new bytes are read, every session's row rewritten
            backfill_after_1pct: {
              seconds: backfillAgain.seconds,
              cpu_seconds: backfillAgain.cpu_seconds,
              peak_rss_mb: backfillAgain.peak_rss_mb,
              tokens: backfillAgainDone.usage_tokens,
              registered: backfillAgainDone.registered,
            },
            incremental_after_1pct: {
              seconds: yokeIncremental.seconds,
              bytes_read: yokeIncrementalResult.bytes_read,
              peak_rss_mb: yokeIncremental.peak_rss_mb,
              fold_seconds: round3(yokeIncrementalResult.seconds),
              fold_cpu_seconds: round3(yokeIncrementalResult.cpu_seconds),
              fold_checkpoint_seconds: round3(yokeIncrementalResult.checkpoint_seconds),
              cpu_seconds: yokeIncremental.cpu_seconds,
            },
            // the same 1 % fold in a process that folded the corpus before (usageFold.ts 'warm'), as the
            // worker folds `hooks usage --async` requests: its code is optimized, no process start is counted
            incremental_warm: {
              fold_seconds: round3(warmIncremental.seconds),
              fold_cpu_seconds: round3(warmIncremental.cpu_seconds),
              fold_checkpoint_seconds: round3(warmIncremental.checkpoint_seconds),
              bytes_read: warmIncremental.bytes_read,
              tokens: warmIncremental.tokens,
              // that process's first pass: the full fold it did before the append
              full_fold_seconds: round3(warmFull.seconds),
              full_fold_cpu_seconds: round3(warmFull.cpu_seconds),
            },
            // the least an incremental fold of this design (whole rows parsed, whole checkpoints) does in a fresh process (usageFold.ts 'floor'): per session read
            // the checkpoint, stat the files, read the new bytes, JSON.parse each new row, write the checkpoint
            incremental_floor: {
              fold_seconds: round3(floorResult.seconds),
              fold_cpu_seconds: round3(floorResult.cpu_seconds),
              rows: floorResult.rows,
              // of which JSON.parse of the new rows, and reading and writing the checkpoints
              parse_seconds: round3(floorResult.parse_seconds),
              checkpoint_seconds: round3(floorResult.checkpoint_seconds),
            },
          },
          ccusage_20_0_24: {
            full: {
              seconds: ccFull.seconds,
              mb_per_s: Math.round(mb / ccFull.seconds),
              peak_rss_mb: ccFull.peak_rss_mb,
              tokens: ccFullTokens,
              cpu_seconds: ccFull.cpu_seconds,
            },
            after_1pct_append: {
              seconds: ccAgain.seconds,
              peak_rss_mb: ccAgain.peak_rss_mb,
              cpu_seconds: ccAgain.cpu_seconds,
              tokens: ccAgainTokens,
            },
          },
          speedup: {
            full: Math.round((ccFull.seconds / yokeFull.seconds) * 100) / 100,
            backfill: Math.round((ccFull.seconds / backfill.seconds) * 100) / 100,
            incremental_vs_ccusage_rescan: Math.round((ccAgain.seconds / yokeIncremental.seconds) * 100) / 100,
            // the same ratios in CPU seconds (work done, whatever share of the cores each process got)
            full_cpu: Math.round((ccFull.cpu_seconds / yokeFull.cpu_seconds) * 100) / 100,
            backfill_cpu: Math.round((ccFull.cpu_seconds / backfill.cpu_seconds) * 100) / 100,
            backfill_after_1pct_vs_ccusage_rescan: Math.round((ccAgain.seconds / backfillAgain.seconds) * 100) / 100,
          },
          // issue 16's targets, each computed from the figures above
          targets: {
            full_throughput_vs_ccusage: {
              ratio: Math.round((ccFull.seconds / yokeFull.seconds) * 100) / 100,
              at_least: 1,
            },
            full_fold_peak_rss_mb: { value: yokeFull.peak_rss_mb, at_most: 100 },
            totals_identical: yokeFullResult.tokens === ccFullTokens && backfillDone.usage_tokens === ccFullTokens,
            // the incremental fold and the backfill run again count what a full rescan counts
            totals_identical_after_1pct:
              yokeIncrementalResult.tokens === ccAgainTokens && backfillAgainDone.usage_tokens === ccAgainTokens,
            totals_identical_warm: warmFull.tokens === ccFullTokens && warmIncremental.tokens === ccAgainTokens,
            // the fold's own time (both in-process, so node's start is not counted twice)
            incremental_share_of_full: {
              ratio: round3(yokeIncrementalResult.seconds / yokeFullResult.seconds),
              // the same in CPU seconds (all threads): on a shared machine the full fold's second
              // thread wins it a larger share of the cores than the one-thread incremental gets
              cpu_ratio: round3(yokeIncrementalResult.cpu_seconds / yokeFullResult.cpu_seconds),
              // the incremental_floor's share: what no fold of this design goes below in this bench's cold process
              floor_ratio: round3(floorResult.seconds / yokeFullResult.seconds),
              // the warm incremental fold (incremental_warm) against the same full fold, in wall and CPU
              // seconds, and against the full pass of its own process
              warm_ratio: round3(warmIncremental.seconds / yokeFullResult.seconds),
              warm_cpu_ratio: round3(warmIncremental.cpu_seconds / yokeFullResult.cpu_seconds),
              warm_ratio_own_full: round3(warmIncremental.seconds / warmFull.seconds),
              at_most: 0.02,
            },
          },
          machine: machine(),
          note: 'token totals differ where the tools count differently: yoke keeps one row per message id (the largest streaming snapshot) across main and subagent files',
        },
        null,
        2,
      ),
    );
  } finally {
    rmSync(config, { recursive: true, force: true });
  }
}

runBench(main);
