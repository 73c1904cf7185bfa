import { sql } from 'kysely';
import type { RunRow } from './database';
import type { Executor } from './pool';

/**
 * T2: the set-based writes of a takeover, each one statement whatever the member count. The
 * caller holds both runs' row locks and has rechecked its prepared inputs; every row keeps its
 * id and evidence, only its owning run changes.
 */

/** The predecessor's members not yet closed (closed members keep their history where they are). */
export async function unclosedMemberIds(db: Executor, runId: string): Promise<number[]> {
  const rows = await db
    .selectFrom('deployment_run_items')
    .select('item_id')
    .where('run_id', '=', runId)
    .where('closed_at', 'is', null)
    .orderBy('item_id')
    .execute();
  return rows.map((r) => r.item_id);
}

/** The predecessor's members a commit already closed (they stay with it). */
export async function closedMemberIds(db: Executor, runId: string): Promise<number[]> {
  const rows = await db
    .selectFrom('deployment_run_items')
    .select('item_id')
    .where('run_id', '=', runId)
    .where('closed_at', 'is not', null)
    .execute();
  return rows.map((r) => r.item_id);
}

/**
 * D4: the runs a new run of this project, flow and target might take over: not yet superseded,
 * executing or failed, newest first.
 */
export async function takeoverCandidates(
  db: Executor,
  scope: { projectId: number; flowId: number; targetId: number },
): Promise<RunRow[]> {
  return db
    .selectFrom('deployment_runs')
    .selectAll()
    .where('project_id', '=', scope.projectId)
    .where('flow_id', '=', scope.flowId)
    .where('target_environment_id', '=', scope.targetId)
    .where('superseded_by_run_id', 'is', null)
    .where('status', 'in', ['executing', 'failed'])
    .orderBy('created_at', 'desc')
    .execute();
}

/**
 * The executions that move: run-scoped ones and those of unclosed members, whatever their
 * status (passed and failed attempts are evidence the successor's QA reads). Locked in id
 * order, so a verdict on one of them commits either wholly before or wholly after the move.
 */
export async function lockMovingExecutions(
  db: Executor,
  runId: string,
  closedItems: number[],
): Promise<{ execution_id: number; status: string }[]> {
  let q = db
    .selectFrom('qa_plan_executions')
    .select(['execution_id', 'status'])
    .where('run_id', '=', runId)
    .orderBy('execution_id')
    .forUpdate();
  if (closedItems.length) q = q.where((eb) => eb.or([eb('item_id', 'is', null), eb('item_id', 'not in', closedItems)]));
  return q.execute();
}

/** Item labels (PREFIX-N) of the given items, for the roll-up rows named `PREFIX-N/case`. */
export async function itemLabels(db: Executor, itemIds: number[]): Promise<string[]> {
  if (itemIds.length === 0) return [];
  const { rows } = await sql<{ item: string }>`
    SELECT p.item_prefix || '-' || i.number AS item
      FROM backlog_items i JOIN projects p ON p.project_id = i.project_id
     WHERE i.item_id = ANY(${itemIds}::int[]) ORDER BY i.item_id`.execute(db);
  return rows.map((r) => r.item);
}

export interface MoveResult {
  members: string[];
  qa: string[];
  executions: number[];
  units: string[];
}

/**
 * Moves membership, QA rows, executions, item obligations bound to the run, and occupancy from
 * `from` to `to`. A row the successor already has for the same member or check (its own fresh
 * admission of an item the predecessor carried) gives way to the inherited one, so nothing is
 * enrolled twice. `restoreAutomatic` undoes O4's automatic retractions of a failed predecessor:
 * those rows were retracted only because that run failed, and the successor owes them.
 */
export async function moveToSuccessor(
  db: Executor,
  from: string,
  to: string,
  opts: { members: number[]; closedItems: string[]; executions: number[]; restoreAutomatic: boolean },
): Promise<MoveResult> {
  const closedPatterns = opts.closedItems.map((i) => `${i}/%`);
  await sql`
    DELETE FROM deployment_run_items s
     WHERE s.run_id = ${to} AND s.item_id = ANY(${opts.members}::int[])`.execute(db);
  const members = await sql<{ item: string }>`
    UPDATE deployment_run_items m SET run_id = ${to},
           -- D10: the membership now delivers the successor's candidate (a cross-project
           -- bound source commit stays what it was).
           delivered_source_sha = CASE WHEN m.delivered_source_sha = (SELECT candidate_sha FROM deployment_runs WHERE run_id = ${from})
                                       THEN (SELECT candidate_sha FROM deployment_runs WHERE run_id = ${to})
                                       ELSE m.delivered_source_sha END
      FROM backlog_items i JOIN projects p ON p.project_id = i.project_id
     WHERE m.run_id = ${from} AND m.item_id = ANY(${opts.members}::int[]) AND i.item_id = m.item_id
    RETURNING p.item_prefix || '-' || i.number AS item`.execute(db);
  const moving = sql`
    SELECT q.check_name FROM deployment_run_qa q
     WHERE q.run_id = ${from} AND NOT (q.source = 'item-rollup' AND q.check_name LIKE ANY(${closedPatterns}::text[]))`;
  await sql`DELETE FROM deployment_run_qa s WHERE s.run_id = ${to} AND s.check_name IN (${moving})`.execute(db);
  const qa = await sql<{ check_name: string }>`
    UPDATE deployment_run_qa q
       SET run_id = ${to},
           retracted_at = CASE WHEN ${opts.restoreAutomatic} AND q.retraction = 'automatic' THEN NULL ELSE q.retracted_at END,
           retraction = CASE WHEN ${opts.restoreAutomatic} AND q.retraction = 'automatic' THEN NULL ELSE q.retraction END
     WHERE q.run_id = ${from} AND q.check_name IN (${moving})
    RETURNING q.check_name`.execute(db);
  await sql`
    UPDATE qa_plan_executions SET run_id = ${to}
     WHERE run_id = ${from} AND execution_id = ANY(${opts.executions}::int[])`.execute(db);
  await sql`UPDATE item_qa_cases SET run_id = ${to} WHERE run_id = ${from}`.execute(db);
  // O1: the origins pass in this transaction; the predecessor stops occupying in the same one.
  const units = await sql<{ unit: string }>`
    WITH passing AS (
      DELETE FROM deployment_run_occupancy o USING deployment_runs r
       WHERE o.run_id = ${from} AND r.run_id = o.run_id AND r.occupancy_released_at IS NULL
      RETURNING o.unit
    )
    INSERT INTO deployment_run_occupancy (run_id, unit) SELECT ${to}, unit FROM passing
    ON CONFLICT DO NOTHING RETURNING unit`.execute(db);
  return {
    members: members.rows.map((r) => r.item).sort(),
    qa: qa.rows.map((r) => r.check_name).sort(),
    executions: [...opts.executions].sort((a, b) => a - b),
    units: units.rows.map((r) => r.unit).sort(),
  };
}

/**
 * The predecessor ends superseded: an executing one is cancelled (it never redeploys: a
 * cancelled run cannot restart), a failed successor keeps its failed status; either way its
 * unfinished stages close and the chain is recorded on both runs.
 */
export async function markSuperseded(db: Executor, from: string, to: string): Promise<void> {
  await sql`
    UPDATE deployment_runs
       SET superseded_by_run_id = ${to},
           status = CASE WHEN status = 'executing' THEN 'cancelled' ELSE status END,
           terminal_at = coalesce(terminal_at, clock_timestamp()),
           terminal_reason = CASE WHEN status = 'executing' THEN ${`superseded by run ${to} (takeover)`} ELSE terminal_reason END,
           occupancy_released_at = coalesce(occupancy_released_at, clock_timestamp())
     WHERE run_id = ${from}`.execute(db);
  await sql`
    UPDATE deployment_run_stages SET status = 'cancelled', finished_at = clock_timestamp(),
           detail = ${`superseded by run ${to}`}
     WHERE run_id = ${from} AND status IN ('pending', 'running', 'waiting')`.execute(db);
  await sql`UPDATE deployment_runs SET supersedes_run_id = ${from} WHERE run_id = ${to}`.execute(db);
}

/** The chain through a run, oldest first: every predecessor it superseded, then every successor. */
export async function takeoverChain(db: Executor, runId: string): Promise<string[]> {
  const { rows } = await sql<{ run_id: string }>`
    WITH RECURSIVE back(run_id, supersedes, depth) AS (
      SELECT run_id, supersedes_run_id, 0 FROM deployment_runs WHERE run_id = ${runId}
      UNION ALL
      SELECT r.run_id, r.supersedes_run_id, b.depth - 1 FROM deployment_runs r JOIN back b ON r.run_id = b.supersedes
    ), fwd(run_id, superseded_by, depth) AS (
      SELECT run_id, superseded_by_run_id, 0 FROM deployment_runs WHERE run_id = ${runId}
      UNION ALL
      SELECT r.run_id, r.superseded_by_run_id, f.depth + 1 FROM deployment_runs r JOIN fwd f ON r.run_id = f.superseded_by
    )
    SELECT run_id FROM (SELECT run_id, depth FROM back UNION SELECT run_id, depth FROM fwd) c ORDER BY depth`.execute(
    db,
  );
  return rows.map((r) => r.run_id);
}

/** T3: a run's executions with their recorded cases, one row per case (or per execution without one). */
export async function qaAttemptsOf(db: Executor, runId: string) {
  const { rows } = await sql<{
    execution_id: number;
    stage_name: string;
    plan_id: string;
    item: string | null;
    status: string;
    execution_verdict_run_id: string | null;
    case_name: string | null;
    verdict: string | null;
    case_verdict_run_id: string | null;
  }>`
    SELECT e.execution_id, e.stage_name, e.plan_id,
           (SELECT p.item_prefix || '-' || i.number FROM backlog_items i JOIN projects p ON p.project_id = i.project_id
             WHERE i.item_id = e.item_id) AS item,
           e.status, e.verdict_run_id AS execution_verdict_run_id,
           r.case_name, r.verdict, r.verdict_run_id AS case_verdict_run_id
      FROM qa_plan_executions e
      LEFT JOIN qa_plan_execution_results r ON r.execution_id = e.execution_id
     WHERE e.run_id = ${runId}
     ORDER BY e.execution_id, r.ordinal`.execute(db);
  return rows;
}
