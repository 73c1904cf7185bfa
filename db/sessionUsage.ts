import { sql, type Insertable, type Selectable } from 'kysely';
import type { Checkpoint } from '../domain/usage/checkpoint';
import type { Harness } from '../domain/harnesses';
import type { SessionUsageTable } from './database';
import type { Executor } from './pool';
import { connectedVisibleSql, visibleSessionSql } from './visibility';

export type SessionUsageRow = Selectable<SessionUsageTable>;
/** What a fold writes: the row but its session and fold time. */
export type SessionUsageWrite = Omit<Insertable<SessionUsageTable>, 'folded_at'>;

/** A session's stored usage (its checkpoint included), if it was ever folded. */
export async function storedUsage(db: Executor, sessionId: string): Promise<SessionUsageRow | undefined> {
  return db.selectFrom('session_usage').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
}

/**
 * For a batch of folds: each registered session among `sessionIds` with its stored usage
 * (undefined: never folded). A session missing from the map is not registered.
 */
export async function registeredWithUsage(
  db: Executor,
  sessionIds: string[],
): Promise<Map<string, { harness: Harness; usage: SessionUsageRow | undefined }>> {
  const out = new Map<string, { harness: Harness; usage: SessionUsageRow | undefined }>();
  if (sessionIds.length === 0) return out;
  const rows = await db
    .selectFrom('sessions as s')
    .leftJoin('session_usage as u', 'u.session_id', 's.session_id')
    .select([
      's.session_id as id',
      's.harness as registered_harness',
      'u.session_id',
      'u.harness',
      'u.reader_version',
      'u.status',
      'u.totals',
      'u.reasons',
      'u.cost_caveat',
      'u.checkpoint',
      'u.folded_at',
    ])
    .where('s.session_id', 'in', sessionIds)
    .execute();
  for (const { id, registered_harness, ...u } of rows)
    out.set(id, { harness: registered_harness, usage: u.session_id === null ? undefined : (u as SessionUsageRow) });
  return out;
}

/** When each of these sessions' usage was last written (absent: never): what a fold compares before it writes. */
export async function usageFoldedAt(db: Executor, sessionIds: string[]): Promise<Map<string, Date>> {
  const rows = await db
    .selectFrom('session_usage')
    .select(['session_id', 'folded_at'])
    .where('session_id', 'in', sessionIds)
    .execute();
  return new Map(rows.map((r) => [r.session_id, r.folded_at]));
}

/**
 * Serializes folds per session (U10): transaction-scoped advisory locks on each session's
 * fold unit, taken in one statement and in one order, so two batches never wait on each other
 * in a cycle.
 */
export async function lockUsageFolds(trx: Executor, sessionIds: string[]): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended('usage-fold:' || id, 0))
              FROM unnest(${[...sessionIds].sort()}::text[]) AS id ORDER BY id`.execute(trx);
}

/** Writes folds' readings (absolute totals replace the stored ones), in one statement. */
export async function writeUsage(db: Executor, rows: SessionUsageWrite[]): Promise<void> {
  if (rows.length === 0) return;
  await db
    .insertInto('session_usage')
    .values(rows)
    .onConflict((oc) =>
      oc.column('session_id').doUpdateSet((eb) => ({
        harness: eb.ref('excluded.harness'),
        reader_version: eb.ref('excluded.reader_version'),
        status: eb.ref('excluded.status'),
        totals: eb.ref('excluded.totals'),
        reasons: eb.ref('excluded.reasons'),
        cost_caveat: eb.ref('excluded.cost_caveat'),
        checkpoint: eb.ref('excluded.checkpoint'),
        folded_at: sql`clock_timestamp()`,
      })),
    )
    .execute();
}

/**
 * U12: what the roster's usage fields derive from, per session (usage columns null: never folded).
 * U13: `visible` is false for a session whose usage the connected role may not read (an actor
 * without a grant on its project); admins and the worker read all.
 */
export async function usageOfSessions(db: Executor, sessionIds: string[]) {
  return db
    .selectFrom('sessions as s')
    .leftJoin('session_usage as u', 'u.session_id', 's.session_id')
    .select(['s.session_id', 's.offered_at', 'u.status', 'u.totals', 'u.reasons', 'u.cost_caveat'])
    .select(connectedVisibleSql('s').as('visible'))
    .where('s.session_id', 'in', sessionIds)
    .execute();
}

/**
 * U13: the 24-hour cohort: sessions ended (ended_at, else terminated_at) in the trailing
 * 24 h, plus sessions offered inside it and still open; probes and rows without a machine
 * are left out. With a viewer's actor, only what that actor may read; without, what the connected role may.
 */
export async function last24hSessions(
  db: Executor,
  viewerActorId?: string,
): Promise<{ session_id: string; machine_id: string }[]> {
  const visible = viewerActorId ? visibleSessionSql('sessions', viewerActorId) : connectedVisibleSql('sessions');
  const { rows } = await sql<{ session_id: string; machine_id: string }>`
    SELECT session_id, machine_id FROM sessions
     WHERE NOT probe AND machine_id IS NOT NULL AND ${visible}
       AND (coalesce(ended_at, terminated_at) >= now() - interval '24 hours'
            OR (coalesce(ended_at, terminated_at) IS NULL AND offered_at >= now() - interval '24 hours'))
     ORDER BY offered_at`.execute(db);
  return rows;
}

/** Each session's per-file watermarks from its stored checkpoint (only the marks, not the accumulators). */
export async function storedWatermarks(db: Executor, sessionIds: string[]): Promise<Map<string, Checkpoint['files']>> {
  const out = new Map<string, Checkpoint['files']>();
  if (sessionIds.length === 0) return out;
  const rows = await db
    .selectFrom('session_usage')
    .select(['session_id', sql<Checkpoint['files'] | null>`checkpoint -> 'files'`.as('files')])
    .where('session_id', 'in', sessionIds)
    .execute();
  for (const r of rows) out.set(r.session_id, r.files ?? {});
  return out;
}

/** Whose a session is, who is connected, and whether that role folds for everyone (admins, the worker). */
export async function foldOwnership(
  db: Executor,
  sessionId: string,
): Promise<{ owner: string | null; me: string; service: boolean }> {
  const { rows } = await sql<{ owner: string | null; me: string; service: boolean }>`
    SELECT (SELECT actor_id FROM sessions WHERE session_id = ${sessionId}) AS owner,
           session_user::text AS me, yoke_is_service() AS service`.execute(db);
  return rows[0]!;
}

/** A `hooks usage --async` request, written under the caller's role (the database refuses another actor's session). */
export async function insertFoldRequest(
  db: Executor,
  request: { session_id: string; harness: SessionUsageRow['harness']; artifacts: string[] },
): Promise<string> {
  const row = await db
    .insertInto('session_usage_fold_requests')
    .values(request)
    .returning('request_id')
    .executeTakeFirstOrThrow();
  return String(row.request_id);
}

/** A session's fold requests not yet settled, oldest first: the only paths the worker opens for it. */
export async function pendingFoldRequests(
  db: Executor,
  sessionId: string,
): Promise<{ request_id: string; harness: SessionUsageRow['harness']; artifacts: string[] }[]> {
  const rows = await db
    .selectFrom('session_usage_fold_requests')
    .select(['request_id', 'harness', 'artifacts'])
    .where('session_id', '=', sessionId)
    .where('done_at', 'is', null)
    .orderBy('request_id')
    .execute();
  return rows.map((r) => ({ ...r, request_id: String(r.request_id) }));
}

/** The worker settles a request with what its fold did (or why it was refused). */
export async function settleFoldRequest(db: Executor, requestId: string, outcome: object): Promise<void> {
  await db
    .updateTable('session_usage_fold_requests')
    .set({ done_at: new Date(), outcome: JSON.stringify(outcome) })
    .where('request_id', '=', requestId)
    .execute();
}
