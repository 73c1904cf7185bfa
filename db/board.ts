import { sql } from 'kysely';
import type { ScheduleInput } from '../domain/schedule';
import type { SessionListing } from './database';
import type { Executor } from './pool';

/** Raw rows of the board read, before the domain renders them. */
export interface BoardReadRows {
  generated_at: string;
  /**
   * Every live session (the schedule, U1, is computed over all of them) and the recently ended
   * ones of the view. `in_project`: the session is of the filtered project or holds its claims
   * (always true without a project filter); the view shows those, and live sessions staffing
   * the project's items.
   */
  sessions: (SessionListing & { state: 'active' | 'recent'; heartbeat_at: string; in_project: boolean })[];
  claims: {
    claim_id: number;
    session_id: string;
    kind: string;
    scope: Record<string, unknown>;
    key: string | null;
    project: string | null;
    item: string | null;
    claimed_at: string;
    released_at: string | null;
    /** W7: set while the row is a reserved waiting-line turn not yet taken. */
    reserved_until: string | null;
  }[];
  doc_pairings: { seat_claim_id: number; lock_claim_id: number }[];
  /** Runs and items of every project, in the shape the schedule (U1) takes them. */
  runs: ScheduleInput['runs'];
  items: ScheduleInput['items'];
}

export interface BoardReadFilter {
  projectId?: number;
  /**
   * At most this many ended sessions (most recent first). Unset: every session ended inside the
   * window, which is Recent Sessions' only bound.
   */
  recentLimit?: number;
  recentWindowHours: number;
}

const ISO = (col: string) => sql.raw(`to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`);

/**
 * The board's one read: the live and recently ended sessions, their claims (live ones for
 * live sessions, all ever held for ended ones), the seat/document-lock pairing (B5), and what the
 * schedule (U1) needs, in one statement. A project filter narrows only the ended sessions and
 * marks the live ones: the schedule must see every live session, run and item, since a session
 * of another project can staff this project's items (U1). Pairing: same session and project
 * id; a current seat with a current lock, a released seat with a released lock whose hold
 * windows overlap.
 */
export async function readBoard(db: Executor, filter: BoardReadFilter): Promise<BoardReadRows> {
  const pid = filter.projectId ?? null;
  const inProject = (alias: string) =>
    sql.raw(
      `(${pid === null ? 'true' : `${alias}.project_id = ${Number(pid)} OR EXISTS (SELECT 1 FROM work_claims pc WHERE pc.session_id = ${alias}.session_id AND pc.project_id = ${Number(pid)})`})`,
    );
  const { rows } = await sql<{ board: BoardReadRows }>`
    WITH act AS (
      SELECT 'active'::text AS state, ${inProject('s')} AS in_project, s.* FROM sessions s
       WHERE s.ended_at IS NULL AND s.terminated_at IS NULL AND NOT s.probe
    ), rec AS (
      SELECT 'recent'::text AS state, true AS in_project, s.* FROM sessions s
       WHERE coalesce(s.ended_at, s.terminated_at) >= now() - make_interval(hours => ${filter.recentWindowHours})
         AND NOT s.probe AND ${inProject('s')}
       ORDER BY coalesce(s.ended_at, s.terminated_at) DESC, s.session_id
       LIMIT ${filter.recentLimit ?? null}::integer -- NULL: no limit
    ), srows AS (
      SELECT * FROM act UNION ALL SELECT * FROM rec
    ), cl AS (
      SELECT c.claim_id, c.session_id, c.target_kind, c.scope, c.key, c.project_id, c.claimed_at, c.released_at,
             c.reserved_until, p.name AS project, ip.item_prefix || '-' || i.number AS item
        FROM srows r
        JOIN work_claims c ON c.session_id = r.session_id AND (r.state = 'recent' OR c.released_at IS NULL)
             -- a waiting-line turn released before it was taken keeps its reserved_until: never held, no past hold (W7)
             AND (c.released_at IS NULL OR c.reserved_until IS NULL)
        LEFT JOIN projects p ON p.project_id = c.project_id
        LEFT JOIN backlog_items i ON i.item_id = c.item_id
        LEFT JOIN projects ip ON ip.project_id = i.project_id
    ), pairs AS (
      SELECT seat.claim_id AS seat_claim_id, lk.claim_id AS lock_claim_id
        FROM cl seat JOIN cl lk ON lk.session_id = seat.session_id AND lk.project_id = seat.project_id
       WHERE seat.target_kind = 'steering' AND lk.target_kind = 'strategy_doc_claim'
         AND ((seat.released_at IS NULL AND lk.released_at IS NULL)
              OR (seat.released_at IS NOT NULL AND lk.released_at IS NOT NULL
                  AND lk.claimed_at < seat.released_at AND seat.claimed_at < lk.released_at))
    ), runs AS (
      SELECT r.run_id, p.name AS project, r.status, r.driver_session_id, r.driver_heartbeat_at,
             coalesce((SELECT json_agg(ip.item_prefix || '-' || i.number ORDER BY i.number)
                         FROM deployment_run_items m JOIN backlog_items i ON i.item_id = m.item_id
                         JOIN projects ip ON ip.project_id = i.project_id
                        WHERE m.run_id = r.run_id), '[]'::json) AS members
        FROM deployment_runs r JOIN projects p ON p.project_id = r.project_id
       WHERE r.status IN ('created', 'executing')
    ), items AS (
      SELECT p.item_prefix || '-' || i.number AS item, p.name AS project,
             EXISTS (SELECT 1 FROM deployment_run_items m JOIN deployment_runs dr ON dr.run_id = m.run_id
                      WHERE m.item_id = i.item_id AND dr.status = 'succeeded') AS delivered
        FROM backlog_items i JOIN projects p ON p.project_id = i.project_id
    )
    SELECT json_build_object(
      'generated_at', ${ISO('now()')},
      'sessions', coalesce((SELECT json_agg(json_build_object(
          'state', r.state, 'in_project', r.in_project, 'session_id', r.session_id, 'actor_id', r.actor_id, 'project', p.name,
          'machine_id', r.machine_id, 'harness', r.harness, 'offered_at', ${ISO('r.offered_at')},
          'heartbeat_at', ${ISO('r.heartbeat_at')},
          'ended_at', ${ISO('coalesce(r.ended_at, r.terminated_at)')})
          ORDER BY r.state, coalesce(r.ended_at, r.terminated_at) DESC, r.offered_at, r.session_id)
        FROM srows r LEFT JOIN projects p ON p.project_id = r.project_id), '[]'::json),
      'claims', coalesce((SELECT json_agg(json_build_object(
          'claim_id', c.claim_id, 'session_id', c.session_id, 'kind', c.target_kind, 'scope', c.scope, 'key', c.key,
          'project', c.project, 'item', c.item, 'claimed_at', ${ISO('c.claimed_at')},
          'released_at', ${ISO('c.released_at')}, 'reserved_until', ${ISO('c.reserved_until')}) ORDER BY c.claim_id)
          FROM cl c), '[]'::json),
      'doc_pairings', coalesce((SELECT json_agg(pairs ORDER BY seat_claim_id, lock_claim_id) FROM pairs), '[]'::json),
      'runs', coalesce((SELECT json_agg(json_build_object(
          'run_id', run_id, 'project', project, 'status', status, 'driver_session_id', driver_session_id,
          'driver_heartbeat_at', ${ISO('driver_heartbeat_at')}, 'members', members) ORDER BY run_id) FROM runs), '[]'::json),
      'items', coalesce((SELECT json_agg(items) FROM items), '[]'::json)
    ) AS board`.execute(db);
  return rows[0]!.board;
}
