import { sql, type Insertable } from 'kysely';
import { sessionEnded, sessionNotRegistered } from '../domain/sessionRefusals';
import type { SessionRow, SessionsTable } from './database';
import type { Executor } from './pool';

/** The acting session must be registered and still live to take or release anything. */
/**
 * The live session, or its refusal. `lock`: for a transaction that goes on to take a claim, the
 * row is locked FOR KEY SHARE, which a session end's FOR UPDATE waits for, so the session cannot
 * end between this check and the claim's commit (C5); a cheap lock, the claim's foreign key
 * takes the same one on insert.
 */
export async function requireLiveSession(
  db: Executor,
  sessionId: string,
  opts: { lock?: boolean } = {},
): Promise<SessionRow> {
  const session = await db
    .selectFrom('sessions')
    .selectAll()
    .where('session_id', '=', sessionId)
    .$if(!!opts.lock, (q) => q.forKeyShare())
    .executeTakeFirst();
  assertLiveSession(sessionId, session);
  return session;
}

/** requireLiveSession's refusals, for a statement that read the session along with more. */
export function assertLiveSession<S extends Pick<SessionRow, 'ended_at' | 'terminated_at' | 'end_reason'>>(
  sessionId: string,
  session: S | undefined,
): asserts session is S {
  if (!session) {
    throw sessionNotRegistered(sessionId);
  }
  const endedAt = session.ended_at ?? session.terminated_at;
  if (endedAt) {
    throw sessionEnded(sessionId, endedAt, session.end_reason);
  }
}

export async function sessionById(db: Executor, sessionId: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
}

/** A session with the name of its project, as every reader shows it. */
export type SessionWithProject = SessionRow & { project: string | null };

function sessionsWithProject(db: Executor) {
  return db
    .selectFrom('sessions as s')
    .leftJoin('projects as p', 'p.project_id', 's.project_id')
    .selectAll('s')
    .select('p.name as project');
}

export async function sessionWithProject(db: Executor, sessionId: string): Promise<SessionWithProject> {
  return sessionsWithProject(db).where('s.session_id', '=', sessionId).executeTakeFirstOrThrow();
}

/** Sessions in the order they were offered; `activeOnly` keeps those neither ended nor terminated. */
export async function listSessionsWithProject(
  db: Executor,
  filter: { projectId?: number; activeOnly?: boolean },
): Promise<SessionWithProject[]> {
  let q = sessionsWithProject(db).orderBy('s.offered_at');
  if (filter.projectId !== undefined) q = q.where('s.project_id', '=', filter.projectId);
  if (filter.activeOnly) q = q.where('s.ended_at', 'is', null).where('s.terminated_at', 'is', null);
  return q.execute();
}

/** Inserts a session unless its id is known; false when it was. */
export async function insertSession(db: Executor, session: Insertable<SessionsTable>): Promise<boolean> {
  const inserted = await db
    .insertInto('sessions')
    .values(session)
    .onConflict((oc) => oc.column('session_id').doNothing())
    .returning('session_id')
    .executeTakeFirst();
  return inserted !== undefined;
}

/** A heartbeat, optionally with the registration's project, machine and harness. */
export async function heartbeatSessionRow(
  db: Executor,
  sessionId: string,
  registration: Partial<
    Pick<
      SessionRow,
      'project_id' | 'machine_id' | 'harness' | 'probe' | 'requested_model' | 'requested_effort' | 'requested_window'
    >
  > = {},
): Promise<void> {
  await db
    .updateTable('sessions')
    .set({ heartbeat_at: sql`now()`, ...registration })
    .where('session_id', '=', sessionId)
    .execute();
}

export async function lockSession(db: Executor, sessionId: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('session_id', '=', sessionId).forUpdate().executeTakeFirst();
}

export async function markSessionEnded(db: Executor, sessionId: string, reason: string): Promise<void> {
  await db
    .updateTable('sessions')
    .set({ ended_at: sql`now()`, end_reason: reason })
    .where('session_id', '=', sessionId)
    .execute();
}

/**
 * U4: records what the provider attested it served; false when no such session exists.
 * U2, U3: a statement that names no window or effort keeps the attested one (facts are never
 * unlearned); only a statement of its own replaces it.
 */
export async function recordServedFacts(
  db: Executor,
  sessionId: string,
  served: { model?: string; window?: number; effort?: string },
): Promise<boolean> {
  // U3: a fact is never unlearned: what a statement does not name keeps its attested value
  const row = await db
    .updateTable('sessions')
    .set({
      served_model: served.model ?? sql<string | null>`served_model`,
      served_window: served.window ?? sql<number | null>`served_window`,
      served_effort: served.effort ?? sql<string | null>`served_effort`,
      served_attested_at: sql`now()`,
    })
    .where('session_id', '=', sessionId)
    .returning('session_id')
    .executeTakeFirst();
  return row !== undefined;
}

/** C5: terminates every live session whose heartbeat is older than `staleAfterMs`; returns their ids. */
export async function terminateStaleSessions(db: Executor, staleAfterMs: number, reason: string): Promise<string[]> {
  // C5: the stale rows are locked FOR UPDATE first (in one order), because the UPDATE's own
  // lock does not conflict with the FOR KEY SHARE a take holds on its session (0062): a take in
  // flight commits before the termination, so the sweep's release that follows sees its claim,
  // and a take after it reads the session terminated and is refused. A heartbeat that commits
  // meanwhile is re-read under the lock, and that session is no longer stale.
  const rows = await db
    .updateTable('sessions')
    .set({ terminated_at: sql`now()`, end_reason: reason })
    .where('session_id', 'in', (s) =>
      s
        .selectFrom('sessions')
        .select('session_id')
        .where('ended_at', 'is', null)
        .where('terminated_at', 'is', null)
        .where('heartbeat_at', '<', sql<Date>`now() - make_interval(secs => ${staleAfterMs / 1000})`)
        .orderBy('session_id')
        .forUpdate(),
    )
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
 * Of `ids`, the sessions another actor owns that this connection may not write for (a user's or
 * agent's connection; admins and the worker act for every actor), with their owners.
 */
export async function sessionsOfOtherActors(db: Executor, ids: string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const { rows } = await sql<{ session_id: string; actor_id: string }>`
    SELECT session_id, actor_id FROM sessions
     WHERE session_id = ANY(${ids}::text[]) AND actor_id <> session_user AND NOT yoke_is_service()`.execute(db);
  return new Map(rows.map((r) => [r.session_id, r.actor_id]));
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
