import { existsSync, statSync } from 'node:fs';
import { hostname, userInfo } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { connectedActor } from '../../db/actors';
import { storedWatermarks } from '../../db/sessionUsage';
import { registerHistoricalSessions, sessionsOfOtherActors } from '../../db/sessions';
import { usageError } from '../../domain/errors';
import { sessionIdProblem } from '../../domain/sessionRefusals';
import { foldPool } from './foldPool';
import { claudeArtifacts } from './readers';
import { sessionUsageActivities, type FoldResult } from './sessionUsage';
import { defaultTranscriptDirs, findTranscripts, type BackfillHarness, type FoundTranscript } from './transcripts';

/**
 * `yoke usage backfill` (issue 16): every transcript of a harness found on this machine
 * becomes a registered session (if it is not one already) and is folded, on every core. A
 * session registered here is history: offered when its transcript starts, ended when it was
 * last written, so it prices at the revision of its own time (U12) and never counts as open.
 * Folds are the ordinary incremental folds (U9), so running it again reads only what grew.
 */
export interface BackfillProgress {
  files_done: number;
  files_total: number;
  /** Bytes past the stored watermarks: what this run reads. */
  bytes_done: number;
  bytes_total: number;
  tokens: number;
  elapsed_s: number;
  /** null until there is a rate to go by. */
  eta_s: number | null;
}

export interface BackfillSessionResult {
  session_id: string;
  path: string;
  registered: boolean;
  status: 'measured' | 'partial' | 'unavailable' | 'failed';
  /** null when nothing was measured (U10: never a fabricated zero). */
  usage_tokens: number | null;
  error?: string;
}

export interface BackfillResult {
  harness: BackfillHarness;
  dirs: string[];
  machine_id: string;
  actor_id: string;
  found: number;
  registered: number;
  folded: number;
  failed: number;
  bytes: number;
  usage_tokens: number;
  seconds: number;
  threads: number;
}

const REGISTER_BATCH = 500;
/** Sessions in flight per fold thread: enough that a thread is never idle while a batch is written. */
const FOLDS_PER_THREAD = 8;

/**
 * Whose sessions a backfill registers (issue 13): the connected role, proven by Postgres; an
 * admin's connection is shared, so it registers them for the local user (issue 16), or for the
 * actor it names. A user naming another actor is refused by Postgres, as `sessions register` is.
 */
async function backfillActor(db: Kysely<Database>, named: string | undefined): Promise<string> {
  if (named !== undefined) return named;
  const connected = await connectedActor(db);
  return connected.admin ? userInfo().username : connected.actor;
}

export async function backfillUsage(
  deps: { db: Kysely<Database> },
  input: {
    harness: BackfillHarness;
    dir?: string;
    machine?: string;
    /** Issue 13: another actor than the connected role, an admin's choice only. */
    actor?: string;
    threads?: number;
    onSession?: (result: BackfillSessionResult, progress: BackfillProgress) => void;
    onStart?: (progress: BackfillProgress) => void;
  },
): Promise<BackfillResult> {
  const started = process.hrtime.bigint();
  const elapsed = () => Number(process.hrtime.bigint() - started) / 1e9;
  let dirs: string[];
  if (input.dir !== undefined) {
    if (!existsSync(input.dir) || !statSync(input.dir).isDirectory()) {
      throw usageError('invalid_argument', `--dir: ${input.dir} is not a directory`, {
        recovery: `pass the harness's transcript directory (default: ${defaultTranscriptDirs(input.harness).join(' or ')})`,
        details: { option: '--dir', dir: input.dir },
      });
    }
    // a Claude config dir holds its transcripts under projects/; a projects dir is taken as is
    dirs = [
      input.harness === 'claude' && existsSync(join(input.dir, 'projects')) ? join(input.dir, 'projects') : input.dir,
    ];
  } else dirs = defaultTranscriptDirs(input.harness);

  const all = findTranscripts(input.harness, dirs);
  // a transcript whose name (or Codex session_meta id) cannot be a session id registers nothing:
  // it is named as failed, and the others go on
  const unusable = new Map<FoundTranscript, string>();
  for (const t of all) {
    const problem = sessionIdProblem(t.sessionId);
    if (problem)
      unusable.set(
        t,
        `session id ${JSON.stringify(t.sessionId.slice(0, 60))}${t.sessionId.length > 60 ? '...' : ''}: ${problem}`,
      );
  }
  const found = all.filter((t) => !unusable.has(t));
  // what each fold will read: its files past their stored watermarks (all of them the first time)
  const sizes = new Map<string, number>();
  for (let i = 0; i < found.length; i += REGISTER_BATCH) {
    const batch = found.slice(i, i + REGISTER_BATCH);
    const marks = await storedWatermarks(
      deps.db,
      batch.map((t) => t.sessionId),
    );
    for (const t of batch) {
      const files = marks.get(t.sessionId) ?? {};
      const paths = new Set([
        ...(input.harness === 'claude' ? claudeArtifacts(t.path) : [t.path]),
        ...Object.keys(files),
      ]);
      let unread = 0;
      for (const path of paths) unread += Math.max(0, safeSize(path) - (files[path]?.offset ?? 0));
      sizes.set(t.sessionId, unread);
    }
  }
  const bytesTotal = [...sizes.values()].reduce((a, b) => a + b, 0);

  const actor = await backfillActor(deps.db, input.actor);
  const machine = input.machine ?? hostname();
  const registered = new Set<string>();
  // a transcript named like another actor's session is not folded into it (issue 13: Postgres
  // would refuse the write with its row-security text); it is named as failed, with its owner
  const foreign = new Map<string, string>();
  for (let i = 0; i < found.length; i += REGISTER_BATCH) {
    const batch = found.slice(i, i + REGISTER_BATCH).map((t) => ({
      session_id: t.sessionId,
      actor_id: actor,
      machine_id: machine,
      harness: input.harness,
      offered_at: t.startedAt,
      ended_at: t.lastWrittenAt < t.startedAt ? t.startedAt : t.lastWrittenAt,
      end_reason: `usage backfill: transcript ${t.path} last written at ${t.lastWrittenAt.toISOString()}`,
    }));
    for (const id of await registerHistoricalSessions(deps.db, batch)) registered.add(id);
    const owners = await sessionsOfOtherActors(
      deps.db,
      batch.map((b) => b.session_id),
    );
    for (const [id, owner] of owners) foreign.set(id, owner);
  }

  const pool = foldPool({ threads: input.threads, bytes: bytesTotal });
  const usage = sessionUsageActivities({ db: deps.db, folder: pool.fold });
  const progress: BackfillProgress = {
    files_done: 0,
    files_total: all.length,
    bytes_done: 0,
    bytes_total: bytesTotal,
    tokens: 0,
    elapsed_s: 0,
    eta_s: null,
  };
  input.onStart?.({ ...progress });
  let folded = 0;
  let failed = 0;
  const report = (t: FoundTranscript, r: FoldResult | Error) => {
    const result: BackfillSessionResult =
      r instanceof Error
        ? // one unreadable transcript must not stop the others: it is named in the output
          {
            session_id: t.sessionId,
            path: t.path,
            registered: registered.has(t.sessionId),
            status: 'failed',
            usage_tokens: null,
            error: r.message,
          }
        : {
            session_id: t.sessionId,
            path: t.path,
            registered: registered.has(t.sessionId),
            status: r.status,
            usage_tokens: r.usage_tokens,
          };
    if (r instanceof Error) failed++;
    else folded++;
    progress.files_done++;
    progress.bytes_done += sizes.get(t.sessionId) ?? 0;
    progress.tokens += result.usage_tokens ?? 0;
    progress.elapsed_s = round(elapsed());
    progress.eta_s =
      progress.bytes_done > 0
        ? round((progress.elapsed_s * (progress.bytes_total - progress.bytes_done)) / progress.bytes_done)
        : null;
    input.onSession?.(result, { ...progress });
  };
  // Sessions go in batches: one read of their stored rows, their folds on every thread, one
  // write transaction. Two batches are in flight, so one's write overlaps the next one's folds;
  // results are reported in order.
  const batch = pool.threads * FOLDS_PER_THREAD;
  let previous: Promise<void> = Promise.resolve();
  for (const [t, problem] of unusable) report(t, new Error(`${problem}; its transcript is not registered or folded`));
  for (const t of found.filter((f) => foreign.has(f.sessionId)))
    report(
      t,
      new Error(
        `session ${t.sessionId} is registered to actor ${foreign.get(t.sessionId)}, not ${actor}: its transcript is not folded into another actor's session (permission_denied)`,
      ),
    );
  const mine = found.filter((f) => !foreign.has(f.sessionId));
  try {
    for (let i = 0; i < mine.length; i += batch) {
      const chunk = mine.slice(i, i + batch);
      const results = usage.foldSessionsUsage(
        chunk.map((t) => ({ sessionId: t.sessionId, harness: input.harness, artifacts: [t.path] })),
      );
      const reported = Promise.all([previous, results]).then(([, r]) => r.forEach((x, k) => report(chunk[k]!, x)));
      reported.catch(() => undefined); // observed when awaited: the next turn, or after the last batch
      await previous;
      previous = reported;
    }
    await previous;
  } finally {
    await pool.close();
  }
  return {
    harness: input.harness,
    dirs,
    machine_id: machine,
    actor_id: actor,
    found: all.length,
    registered: registered.size,
    folded,
    failed,
    bytes: bytesTotal,
    usage_tokens: progress.tokens,
    seconds: round(elapsed()),
    threads: pool.threads,
  };
}

function safeSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

const round = (x: number) => Math.round(x * 100) / 100;
