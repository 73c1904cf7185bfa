import { sessionActivities } from '../activities/sessions';
import type { CommandContext } from './context';

/** The longest gap between two heartbeats, whatever the stale threshold. */
const MAX_INTERVAL_MS = 60_000;

/** A third of the stale threshold: two heartbeats may be missed before the sweep would end the session. */
export function keepAliveIntervalMs(staleAfterMs: number): number {
  return Math.max(200, Math.min(MAX_INTERVAL_MS, Math.floor(staleAfterMs / 3)));
}

/**
 * W7 W9: a CLI process that blocks for a session (`acquire --wait`, a watch run as a session) is
 * that session alive. Without heartbeats, a wait longer than YOKE_SESSION_STALE_AFTER_SECONDS
 * lets the stale-session sweep end the session and cancel the very wait it is in. The heartbeat
 * runs on its own timer, beside whatever the wait is doing (a Temporal update or a Postgres
 * watch). A heartbeat that fails (the session ended, Postgres away) is tried again at the next
 * tick; the wait itself reports what became of it. Returns the function that stops it.
 */
export function keepSessionAlive(
  ctx: CommandContext,
  sessionId: string,
  first?: Promise<unknown>,
): () => Promise<void> {
  const sessions = sessionActivities({ db: ctx.db });
  const beat = () => sessions.heartbeatSession({ sessionId }).catch(() => undefined);
  // `first`: the caller's own first heartbeat, already made; else this one beats at once.
  let inFlight: Promise<unknown> = first ?? beat();
  const timer = setInterval(() => {
    inFlight = beat();
  }, keepAliveIntervalMs(ctx.config.staleAfterMs));
  return async () => {
    clearInterval(timer);
    await inFlight; // the store is closed after the command; no heartbeat may be left writing
  };
}

/**
 * A watch (`qa watch`, `deployment-runs watch`) run as a session (`--session S` or
 * YOKE_SESSION_ID) keeps that session alive while it follows; without one it heartbeats nothing.
 * C1: a watch run as a session acts as it, so an unregistered or ended session is refused
 * (session_not_registered, session_ended) before anything is followed, not retried in silence.
 */
export async function keepWatcherAlive(ctx: CommandContext, session?: string): Promise<() => Promise<void>> {
  const id = (session ?? process.env.YOKE_SESSION_ID)?.trim();
  if (!id) return async () => undefined;
  const first = sessionActivities({ db: ctx.db }).heartbeatSession({ sessionId: id });
  await first;
  return keepSessionAlive(ctx, id, first);
}
