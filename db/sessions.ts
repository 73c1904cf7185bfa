import { sessionEnded, sessionNotRegistered } from '../domain/sessionRefusals';
import type { SessionRow } from './database';
import type { Executor } from './pool';

/** The acting session must be registered and still live to take or release anything. */
export async function requireLiveSession(db: Executor, sessionId: string): Promise<SessionRow> {
  const session = await db.selectFrom('sessions').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
  if (!session) {
    throw sessionNotRegistered(sessionId);
  }
  const endedAt = session.ended_at ?? session.terminated_at;
  if (endedAt) {
    throw sessionEnded(sessionId, endedAt, session.end_reason);
  }
  return session;
}

export async function sessionById(db: Executor, sessionId: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
}

export interface HistoricalSession {
  session_id: string;
  actor_id: string;
  machine_id: string;
  harness: SessionRow['harness'];
  offered_at: Date;
  ended_at: Date;
  end_reason: string;
}

/**
 * Registers sessions found after the fact (a usage backfill) in one statement; a session id
 * already known is left exactly as it is. Returns the ids this registered.
 */
export async function registerHistoricalSessions(db: Executor, rows: HistoricalSession[]): Promise<string[]> {
  if (rows.length === 0) return [];
  const inserted = await db
    .insertInto('sessions')
    .values(rows.map((r) => ({ ...r, heartbeat_at: r.ended_at, probe: false })))
    .onConflict((oc) => oc.column('session_id').doNothing())
    .returning('session_id')
    .execute();
  return inserted.map((r) => r.session_id);
}
