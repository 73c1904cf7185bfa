import { sql } from 'kysely';
import type { RunRow } from './database';
import type { ItemRow } from './items';
import type { Executor } from './pool';

/** A member as the closure diagnostic reads it: the membership, its item, and whether this run must close it. */
export interface ClosureMemberRow extends ItemRow {
  delivery_intent: 'progress' | 'final';
  requirement_selection: string[] | null;
  closed_at: Date | null;
  /** A final member of the run's own project whose completion flow is this run's flow (S2, D8). */
  required: boolean;
}

/**
 * D2: every member of a run with its item and completion authority, in one statement (the
 * authority test is `hasCompletionAuthority` done in SQL: the item's completion flow, else
 * its project's default one, is the run's flow).
 */
export async function closureMembers(
  db: Executor,
  run: Pick<RunRow, 'run_id' | 'project_id' | 'flow_id'>,
): Promise<ClosureMemberRow[]> {
  const { rows } = await sql<ClosureMemberRow>`
    SELECT i.item_id, i.project_id, p.name AS project, i.title, i.status, i.status_changed_at,
           i.delivery_evidence, i.completion_flow_id, i.tracker_issue, i.lane_path,
           p.item_prefix || '-' || i.number AS item,
           m.delivery_intent, m.requirement_selection, m.closed_at,
           (m.delivery_intent = 'final' AND i.project_id = ${run.project_id}
             AND COALESCE(i.completion_flow_id,
                   (SELECT f.flow_id FROM flows f WHERE f.project_id = i.project_id AND f.completion_flow LIMIT 1))
                 = ${run.flow_id}) IS TRUE AS required
      FROM deployment_run_items m
      JOIN backlog_items i ON i.item_id = m.item_id
      JOIN projects p ON p.project_id = i.project_id
     WHERE m.run_id = ${run.run_id}
     ORDER BY m.item_id`.execute(db);
  return rows;
}

export interface LineageEntry {
  run_id: string;
  status: string;
  candidate_sha: string;
  created_at: string;
}

/**
 * The release lineage of a run: the takeover chain it belongs to (supersedes_run_id links),
 * oldest first, in one recursive statement that walks both directions.
 */
export async function releaseLineage(db: Executor, runId: string): Promise<LineageEntry[]> {
  const { rows } = await sql<{ run_id: string; status: string; candidate_sha: string; created_at: Date }>`
    WITH RECURSIVE back(run_id, depth) AS (
        SELECT ${runId}::text, 0
      UNION
        SELECT r.supersedes_run_id, b.depth - 1
          FROM back b JOIN deployment_runs r ON r.run_id = b.run_id
         WHERE r.supersedes_run_id IS NOT NULL AND b.depth > -1000
    ), fwd(run_id, depth) AS (
        SELECT ${runId}::text, 0
      UNION
        SELECT r.run_id, f.depth + 1
          FROM fwd f JOIN deployment_runs r ON r.supersedes_run_id = f.run_id
         WHERE f.depth < 1000
    ), chain AS (SELECT * FROM back UNION SELECT * FROM fwd)
    SELECT r.run_id, r.status, r.candidate_sha, r.created_at
      FROM chain c JOIN deployment_runs r ON r.run_id = c.run_id
     GROUP BY r.run_id, r.status, r.candidate_sha, r.created_at
     ORDER BY min(c.depth)`.execute(db);
  return rows.map((r) => ({ ...r, created_at: r.created_at.toISOString() }));
}
