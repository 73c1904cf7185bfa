import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { fold, foldingInBulk, type Checkpoint, type Harness, type Reading } from './readers';

/**
 * Folds many sessions at once (a backfill, the usage bench): one thread per core, the calling
 * thread included, each folding whole sessions, so a corpus of many transcripts is read on
 * every core while one session's accumulators stay on one thread. Callers hand work over
 * through `boundedEach`, so the queue, and memory, stay bounded however many sessions there
 * are. A single fold (the hook path) never needs this: it runs `fold` in its own thread.
 */
export interface FoldJob {
  harness: Harness;
  previous: Checkpoint | undefined;
  artifacts: string[];
}

/** What a worker thread is told at its start: the bytes it can expect to fold (see `foldingInBulk`). */
export interface FoldWorkerData {
  share: number;
}

export type Folder = (harness: Harness, previous: Checkpoint | undefined, artifacts: string[]) => Promise<Reading>;

export interface FoldPool {
  fold: Folder;
  /** Threads folding, the caller's included. */
  threads: number;
  /** Folds each thread has finished, the caller's first: how evenly the work was shared. */
  folds(): number[];
  close(): Promise<void>;
}

interface Lane {
  busy: number;
  done: number;
  run: Folder;
}

/** The compiled worker script; absent when running from TypeScript sources (jest), where folds stay in-thread. */
const WORKER_SCRIPT = join(__dirname, 'foldWorker.js');

function workerLane(share: number): { lane: Lane; worker: Worker } {
  const worker = new Worker(WORKER_SCRIPT, { workerData: { share } satisfies FoldWorkerData });
  const pending = new Map<number, { resolve: (r: Reading) => void; reject: (e: Error) => void }>();
  let next = 0;
  worker.on('message', (m: { id: number; reading?: Reading; error?: string }) => {
    const p = pending.get(m.id)!;
    pending.delete(m.id);
    if (m.error !== undefined) p.reject(new Error(m.error));
    else p.resolve(m.reading!);
  });
  worker.on('error', (err) => {
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  });
  const lane: Lane = {
    busy: 0,
    done: 0,
    run: (harness, previous, artifacts) =>
      new Promise<Reading>((resolve, reject) => {
        const id = next++;
        pending.set(id, { resolve, reject });
        worker.postMessage({ id, job: { harness, previous, artifacts } satisfies FoldJob });
      }),
  };
  return { lane, worker };
}

/**
 * The calling thread's folds. A fold is almost all synchronous work chained by promises, so
 * folds run back to back on this thread never return to the event loop, and a worker's
 * finished fold (a message) would wait, its thread idle, until this thread ran out of work:
 * two threads folded no faster than one. Each fold here first gives the loop a turn.
 */
const callerLane: Folder = async (harness, previous, artifacts) => {
  await new Promise<void>((resolve) => setImmediate(resolve));
  return fold(harness, previous, artifacts);
};

/**
 * A worker thread costs tens of milliseconds to start (its own isolate and module loads, far
 * more on a busy machine): one is worth it only for this much unread transcript.
 */
export const BYTES_PER_EXTRA_THREAD = 32 << 20;

/** `bytes`: how much the caller expects to read (size past each watermark), which sizes the pool. */
export function foldPool(options: { threads?: number; bytes?: number } = {}): FoldPool {
  const wanted = Math.max(1, options.threads ?? availableParallelism());
  const worthIt =
    options.bytes === undefined
      ? wanted
      : Math.max(1, Math.min(wanted, 1 + Math.floor(options.bytes / BYTES_PER_EXTRA_THREAD)));
  const threads = existsSync(WORKER_SCRIPT) ? worthIt : 1;
  const share = Math.floor((options.bytes ?? 0) / threads);
  foldingInBulk(share);
  const workers = Array.from({ length: threads - 1 }, () => workerLane(share));
  const lanes: Lane[] = [{ busy: 0, done: 0, run: callerLane }, ...workers.map((w) => w.lane)];
  return {
    threads,
    folds: () => lanes.map((l) => l.done),
    async fold(harness, previous, artifacts) {
      const lane = lanes.reduce((a, b) => (b.busy < a.busy ? b : a)); // the least busy thread takes it
      lane.busy++;
      try {
        const reading = await lane.run(harness, previous, artifacts);
        lane.done++;
        return reading;
      } finally {
        lane.busy--;
      }
    },
    async close() {
      await Promise.all(workers.map((w) => w.worker.terminate()));
    },
  };
}

/**
 * Runs `each` over `items` with at most `limit` running at once, in order: the bounded queue
 * between a session list of any length and the pool. The first failure stops new work and is
 * rethrown once the running ones finish.
 */
export async function boundedEach<T>(
  items: Iterable<T>,
  limit: number,
  each: (item: T) => Promise<void>,
): Promise<void> {
  const running = new Set<Promise<void>>();
  let failed = false;
  let failure: unknown;
  for (const item of items) {
    if (failed) break;
    const p: Promise<void> = each(item)
      .catch((err: unknown) => {
        if (!failed) [failed, failure] = [true, err];
      })
      .finally(() => running.delete(p));
    running.add(p);
    if (running.size >= limit) await Promise.race(running);
  }
  await Promise.all(running);
  if (failed) throw failure;
}
