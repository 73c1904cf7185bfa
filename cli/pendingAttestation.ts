import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { yokeHome } from '../config/paths';

/**
 * U4: a served-facts write the status line or the served-model hook could not make (database
 * down or timed out) is recorded on this machine and retried by the session's next
 * hook (either of them), never swallowed. One small file per session under `$YOKE_HOME/pending-attestations/`; facts
 * merge newest first (a later statement's model or window wins, an absent one keeps the
 * earlier), so a retry never unlearns a fact. Loads only node:fs, like the status line.
 * Only a write that could not reach Postgres is kept: one Postgres refused would be refused
 * again. The facts are kept under the database role that failed to write them, and only a hook
 * connecting as that role reads them back: two actors sharing this machine's YOKE_HOME never
 * write each other's facts under their own role (issue 13).
 */
export interface PendingAttestation {
  session_id: string;
  model: string | null;
  window: number | null;
  /** Served effort (the served-model hook's --effort); absent in records of older builds. */
  effort?: string | null;
  failed_at: string;
  error: string;
  attempts: number;
  /** The database role that failed to write them; absent in records of older builds. */
  role?: string;
}

function fileOf(sessionId: string): string {
  return join(yokeHome(), 'pending-attestations', `${encodeURIComponent(sessionId)}.json`);
}

/** The facts kept for this session by a hook connecting as `role`. */
export function readPending(sessionId: string, role: string): PendingAttestation | undefined {
  try {
    const pending = JSON.parse(readFileSync(fileOf(sessionId), 'utf8')) as PendingAttestation;
    // a record naming no role (an older build's) is no one's to replay
    return pending.role === role ? pending : undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    return undefined; // a torn or foreign file holds no fact worth more than the next statement
  }
}

/** Records the facts that failed to be written, merged over what was already pending. */
export function recordPending(
  sessionId: string,
  role: string,
  facts: { model: string | null; window: number | null; effort?: string | null },
  error: string,
): PendingAttestation {
  const before = readPending(sessionId, role);
  const pending: PendingAttestation = {
    session_id: sessionId,
    model: facts.model ?? before?.model ?? null,
    window: facts.window ?? before?.window ?? null,
    effort: facts.effort ?? before?.effort ?? null,
    failed_at: new Date().toISOString(),
    error,
    attempts: (before?.attempts ?? 0) + 1,
    role,
  };
  const file = fileOf(sessionId);
  mkdirSync(join(file, '..'), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(pending)); // renamed into place: never half-written
  renameSync(tmp, file);
  return pending;
}

export function clearPending(sessionId: string): void {
  rmSync(fileOf(sessionId), { force: true });
}
