import { sql } from 'kysely';
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

/** C5: terminates every live session whose heartbeat is older than `staleAfterMs`; returns their ids. */
export async function terminateStaleSessions(db: Executor, staleAfterMs: number, reason: string): Promise<string[]> {
  const rows = await db
    .updateTable('sessions')
    .set({ terminated_at: sql`now()`, end_reason: reason })
    .where('ended_at', 'is', null)
    .where('terminated_at', 'is', null)
    .where('heartbeat_at', '<', sql<Date>`now() - make_interval(secs => ${staleAfterMs / 1000})`)
    .returning('session_id')
    .execute();
  return rows.map((r) => r.session_id);
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
