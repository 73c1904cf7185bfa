import { sql, type Kysely } from 'kysely';
import type { UsageTotals } from '../domain/usage/buckets';
import type { ModelRates } from '../domain/usage/pricing';
import type { Database, SessionListing } from './database';
import { connectedVisibleSql, visibleSessionSql } from './visibility';

/**
 * The usage views' reads. Each is one statement: the rows, every pricing revision (the view
 * prices each session with the revision in force at its start, U12) and the viewing session's
 * actor, so the view is consistent and U13 is applied inside the statement.
 */

/** A pricing revision as the views read it, through JSON (the caller builds the catalog). */
export interface PricingRevisionRow {
  revision_id: string;
  effective_at: string;
  estimated: boolean;
  rates: Record<string, ModelRates>;
  backdate_reason: string | null;
  imported_at: string;
}

export interface SessionShowRow extends SessionListing {
  terminated_at: string | null;
  end_reason: string | null;
  requested_model: string | null;
  requested_effort: string | null;
  requested_window: number | null;
  served_model: string | null;
  served_effort: string | null;
  served_window: number | null;
  served_attested_at: string | null;
  usage_status: 'measured' | 'partial' | 'unavailable' | null;
  totals: UsageTotals | null;
  reasons: string[] | null;
  cost_caveat: string | null;
  folded_at: string | null;
}

export interface UsageReportRow {
  session_id: string;
  offered_at: string;
  project: string | null;
  machine_id: string | null;
  model: string;
  usage: UsageTotals[string];
  /** the session's reading: a partial one makes every sum it enters partial */
  usage_status: 'measured' | 'partial';
  /** what the fold noted against the session's cost (cost_caveat of session_usage) */
  cost_caveat: string | null;
}

/**
 * What every view reads with its rows: the viewer's actor (null when the viewer is not a
 * registered session; undefined viewer = the connected role, bounded by its own grants unless an admin).
 */
interface ViewRead<T> {
  viewer_actor: string | null;
  rows: T;
  revisions: PricingRevisionRow[];
}

/** U13 inside the view's own statement: the viewer's actor is read by a subquery. */
function visibility(viewerSessionId: string | undefined) {
  if (viewerSessionId === undefined)
    return { visible: connectedVisibleSql('s'), viewerActor: sql<string | null>`NULL::text` };
  const actor = sql<string>`(SELECT va.actor_id FROM sessions va WHERE va.session_id = ${viewerSessionId})`;
  return { visible: visibleSessionSql('s', actor), viewerActor: actor };
}

/** `yoke sessions show S`: the session with its usage, if the viewer may read it. */
export async function readSessionShow(
  db: Kysely<Database>,
  sessionId: string,
  viewerSessionId: string | undefined,
): Promise<ViewRead<SessionShowRow | null>> {
  const { visible, viewerActor } = visibility(viewerSessionId);
  const { rows } = await sql<{
    viewer_actor: string | null;
    session: SessionShowRow | null;
    revisions: PricingRevisionRow[] | null;
  }>`
    SELECT (SELECT to_jsonb(x) FROM (
              SELECT s.session_id, s.actor_id, p.name AS project, s.machine_id, s.harness, s.offered_at,
                     s.ended_at, s.terminated_at, s.end_reason, s.requested_model, s.requested_effort,
                     s.requested_window, s.served_model, s.served_effort, s.served_window, s.served_attested_at,
                     u.status AS usage_status, u.totals, u.reasons, u.cost_caveat, u.folded_at
                FROM sessions s
                LEFT JOIN projects p ON p.project_id = s.project_id
                LEFT JOIN session_usage u ON u.session_id = s.session_id
               WHERE s.session_id = ${sessionId} AND ${visible}) x) AS session,
           (SELECT jsonb_agg(r) FROM pricing_revisions r) AS revisions,
           ${viewerActor} AS viewer_actor`.execute(db);
  const row = rows[0]!;
  return { viewer_actor: row.viewer_actor, rows: row.session, revisions: row.revisions ?? [] };
}

/**
 * `yoke usage report`: one row per non-probe session and model with measured usage, offered in
 * [sinceAt, untilAt), oldest first.
 */
export async function readUsageReport(
  db: Kysely<Database>,
  range: { sinceAt: string | null; untilAt: string | null },
  viewerSessionId: string | undefined,
): Promise<ViewRead<UsageReportRow[]>> {
  const { visible, viewerActor } = visibility(viewerSessionId);
  const { sinceAt, untilAt } = range;
  const { rows } = await sql<{
    viewer_actor: string | null;
    usage: UsageReportRow[] | null;
    revisions: PricingRevisionRow[] | null;
  }>`
    SELECT (SELECT jsonb_agg(x ORDER BY x.offered_at, x.session_id, x.model) FROM (
              SELECT s.session_id, s.offered_at, p.name AS project, s.machine_id, m.key AS model, m.value AS usage,
                     u.status AS usage_status, u.cost_caveat
                FROM sessions s
                JOIN session_usage u ON u.session_id = s.session_id AND u.status <> 'unavailable'
                LEFT JOIN projects p ON p.project_id = s.project_id
               CROSS JOIN LATERAL jsonb_each(u.totals) m
               WHERE NOT s.probe AND ${visible}
                 AND (${sinceAt}::timestamptz IS NULL OR s.offered_at >= ${sinceAt}::timestamptz)
                 AND (${untilAt}::timestamptz IS NULL OR s.offered_at < ${untilAt}::timestamptz)) x) AS usage,
           (SELECT jsonb_agg(r) FROM pricing_revisions r) AS revisions,
           ${viewerActor} AS viewer_actor`.execute(db);
  const row = rows[0]!;
  return { viewer_actor: row.viewer_actor, rows: row.usage ?? [], revisions: row.revisions ?? [] };
}
