import { sql } from 'kysely';
import { refusal } from '../domain/errors';
import type { PredecessorOnHost } from '../domain/placeTaking';
import type { QaPlanDefinition } from '../domain/projectDefinition';
import type { ExecutionResultRow, ExecutionRow, ExecutionStatus } from './database';
import type { Executor } from './pool';

/**
 * QA plan executions and their per-case results: every statement on qa_plan_executions,
 * qa_plan_execution_results and qa_plan_execution_leases lives here, so settlement can read
 * and end executions through the same functions.
 */

export function executionNotFound(executionId: number) {
  return refusal('qa_execution_not_found', `no QA plan execution has id ${executionId}`, {
    recovery: 'begin one with: yoke qa begin --run RUN --stage S --plan P',
    details: { execution_id: executionId },
  });
}

export async function planOf(db: Executor, projectId: number, planId: string): Promise<QaPlanDefinition | undefined> {
  const row = await db
    .selectFrom('qa_plans')
    .select('definition')
    .where('project_id', '=', projectId)
    .where('plan_id', '=', planId)
    .executeTakeFirst();
  return row?.definition;
}

export async function planIdsOf(db: Executor, projectId: number): Promise<string[]> {
  const rows = await db.selectFrom('qa_plans').select('plan_id').where('project_id', '=', projectId).execute();
  return rows.map((r) => r.plan_id).sort();
}

/** A new execution: its start identity (Q1) and the plan it walks. */
export type NewExecution = Pick<
  ExecutionRow,
  | 'run_id'
  | 'stage_name'
  | 'plan_id'
  | 'item_id'
  | 'plan'
  | 'session_id'
  | 'target_environment'
  | 'target_url'
  | 'served_revision_path'
  | 'delivered_commit'
  | 'observed_commit'
  | 'revision_check'
  | 'revision_detail'
>;

export async function insertExecution(db: Executor, e: NewExecution): Promise<ExecutionRow> {
  return db
    .insertInto('qa_plan_executions')
    .values({ ...e, plan: JSON.stringify(e.plan) })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The running executions a session began for one run, stage, plan and item (null: run-scoped). */
export async function runningExecutionsOf(
  db: Executor,
  scope: { run_id: string; stage_name: string; plan_id: string; item_id: number | null; session_id: string },
): Promise<Pick<ExecutionRow, 'execution_id' | 'began_at'>[]> {
  let q = db
    .selectFrom('qa_plan_executions')
    .select(['execution_id', 'began_at'])
    .where('run_id', '=', scope.run_id)
    .where('stage_name', '=', scope.stage_name)
    .where('plan_id', '=', scope.plan_id)
    .where('session_id', '=', scope.session_id)
    .where('status', '=', 'running');
  q = scope.item_id === null ? q.where('item_id', 'is', null) : q.where('item_id', '=', scope.item_id);
  return q.orderBy('execution_id').execute();
}

/**
 * A run's running executions for one member each, keyed `stage|plan|PREFIX-N` (the newest per
 * key): what a member waiting on a plan should follow rather than begin again. One statement.
 */
export async function runningMemberExecutions(db: Executor, runId: string): Promise<Map<string, number>> {
  const rows = await db
    .selectFrom('qa_plan_executions as e')
    .innerJoin('backlog_items as i', 'i.item_id', 'e.item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select(['e.execution_id', 'e.stage_name', 'e.plan_id', sql<string>`p.item_prefix || '-' || i.number`.as('item')])
    .where('e.run_id', '=', runId)
    .where('e.status', '=', 'running')
    .orderBy('e.execution_id')
    .execute();
  return new Map(rows.map((r) => [`${r.stage_name}|${r.plan_id}|${r.item}`, r.execution_id]));
}

export async function executionById(
  db: Executor,
  executionId: number,
  opts: { lock?: boolean } = {},
): Promise<ExecutionRow> {
  let q = db.selectFrom('qa_plan_executions').selectAll().where('execution_id', '=', executionId);
  if (opts.lock) q = q.forUpdate();
  const row = await q.executeTakeFirst();
  if (!row) throw executionNotFound(executionId);
  return row;
}

export async function resultsOf(db: Executor, executionId: number): Promise<ExecutionResultRow[]> {
  return db
    .selectFrom('qa_plan_execution_results')
    .selectAll()
    .where('execution_id', '=', executionId)
    .orderBy('ordinal')
    .execute();
}

/** A recorded case: the columns a recorder names; the rest default to null. */
export type NewResult = Pick<
  ExecutionResultRow,
  'execution_id' | 'case_name' | 'ordinal' | 'kind' | 'verdict' | 'observed_commit' | 'revision_check'
> &
  Partial<
    Pick<
      ExecutionResultRow,
      'test_machine' | 'exit_code' | 'output_digest' | 'output_excerpt' | 'note' | 'recorded_by_session_id'
    >
  >;

/** A case is recorded once: a retried record finds the first one. */
export async function insertResult(
  db: Executor,
  r: NewResult,
): Promise<{ row: ExecutionResultRow; recorded: boolean }> {
  const inserted = await db
    .insertInto('qa_plan_execution_results')
    .values(r)
    .onConflict((oc) => oc.columns(['execution_id', 'case_name']).doNothing())
    .returningAll()
    .executeTakeFirst();
  if (inserted) return { row: inserted, recorded: true };
  const row = await db
    .selectFrom('qa_plan_execution_results')
    .selectAll()
    .where('execution_id', '=', r.execution_id)
    .where('case_name', '=', r.case_name)
    .executeTakeFirstOrThrow();
  return { row, recorded: false };
}

export async function advanceCursor(db: Executor, executionId: number, ordinal: number): Promise<void> {
  await db
    .updateTable('qa_plan_executions')
    .set({ cursor_ordinal: sql`greatest(cursor_ordinal, ${ordinal})` })
    .where('execution_id', '=', executionId)
    .execute();
}

export async function recordLease(
  db: Executor,
  executionId: number,
  lease: { claim_id: number; test_machine: string; claimed_at: Date },
): Promise<void> {
  await db
    .insertInto('qa_plan_execution_leases')
    .values({ execution_id: executionId, ...lease })
    .onConflict((oc) => oc.doNothing())
    .execute();
  await db
    .updateTable('qa_plan_executions')
    .set({ held_claim_id: lease.claim_id })
    .where('execution_id', '=', executionId)
    .execute();
}

export async function clearHeldClaim(db: Executor, executionId: number): Promise<void> {
  await db
    .updateTable('qa_plan_executions')
    .set({ held_claim_id: null })
    .where('execution_id', '=', executionId)
    .execute();
}

export async function hasHeldMachine(db: Executor, executionId: number, testMachine: string): Promise<boolean> {
  const row = await db
    .selectFrom('qa_plan_execution_leases')
    .select('claim_id')
    .where('execution_id', '=', executionId)
    .where('test_machine', '=', testMachine)
    .executeTakeFirst();
  return !!row;
}

/**
 * W6 evidence: the latest earlier execution of the same run, stage and shared plan, and what
 * it held on the machine (the queued_at of its granted waits, the claimed_at of its leases).
 */
export async function predecessorOnHost(
  db: Executor,
  e: ExecutionRow,
  testMachine: string,
): Promise<(PredecessorOnHost & { execution_id: number }) | undefined> {
  const pred = await db
    .selectFrom('qa_plan_executions')
    .select(['execution_id', 'status', 'aborted_while_holding'])
    .where('run_id', '=', e.run_id)
    .where('stage_name', '=', e.stage_name)
    .where('plan_id', '=', e.plan_id)
    .where('item_id', 'is', null)
    .where('execution_id', '<', e.execution_id)
    .orderBy('execution_id', 'desc')
    .executeTakeFirst();
  if (!pred) return undefined;
  const waits = await db
    .selectFrom('qa_test_machine_waits')
    .select('queued_at')
    .where('qa_plan_execution_id', '=', pred.execution_id)
    .where('test_machine', '=', testMachine)
    .where('state', '=', 'granted')
    .execute();
  const leases = await db
    .selectFrom('qa_plan_execution_leases')
    .select('claimed_at')
    .where('execution_id', '=', pred.execution_id)
    .where('test_machine', '=', testMachine)
    .execute();
  return {
    execution_id: pred.execution_id,
    abortedWhileHolding: pred.status === 'aborted' && pred.aborted_while_holding,
    grantedWaitQueuedAts: waits.map((w) => w.queued_at.toISOString()),
    leaseClaimedAts: leases.map((l) => l.claimed_at.toISOString()),
  };
}

/** Marks a live execution ended; returns it as it was, or undefined when it had already ended. */
export async function markExecutionEnded(
  db: Executor,
  executionId: number,
  status: Exclude<ExecutionStatus, 'running'>,
  reason: string,
): Promise<ExecutionRow | undefined> {
  const before = await db
    .selectFrom('qa_plan_executions')
    .selectAll()
    .where('execution_id', '=', executionId)
    .where('status', '=', 'running')
    .forUpdate()
    .executeTakeFirst();
  if (!before) return undefined;
  await db
    .updateTable('qa_plan_executions')
    .set({
      status,
      ended_at: sql`clock_timestamp()`,
      release_reason: reason,
      held_claim_id: null,
      aborted_while_holding: status === 'aborted' && before.held_claim_id !== null,
    })
    .where('execution_id', '=', executionId)
    .execute();
  return before;
}

/**
 * A settled execution answers the run QA rows bound to its plan at its stage: a run-scoped
 * execution all of them, an item execution its member's.
 */
export async function answerPlanRows(
  db: Executor,
  e: ExecutionRow,
  item: string | null,
  status: 'passed' | 'failed',
): Promise<string[]> {
  const rows = await db
    .updateTable('deployment_run_qa')
    .set({ status, updated_at: sql`clock_timestamp()` })
    .where('run_id', '=', e.run_id)
    .where('stage_name', '=', e.stage_name)
    .where('plan_id', '=', e.plan_id)
    .where('retracted_at', 'is', null)
    .where('status', '=', 'pending')
    .$if(item !== null, (q) => q.where('check_name', 'like', `${item}/%`))
    .returning('check_name')
    .execute();
  return rows.map((r) => r.check_name);
}

export async function itemLabel(db: Executor, itemId: number | null): Promise<string | null> {
  if (itemId === null) return null;
  const row = await db
    .selectFrom('backlog_items as i')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'))
    .where('i.item_id', '=', itemId)
    .executeTakeFirstOrThrow();
  return row.item;
}

/** S4: the live item-level executions of some members of a run, with whether any case is recorded. */
export async function liveItemExecutions(
  db: Executor,
  runId: string,
  itemIds: number[],
): Promise<{ execution_id: number; item_id: number; cursor_ordinal: number; has_result: boolean }[]> {
  if (itemIds.length === 0) return [];
  const { rows } = await sql<{ execution_id: number; item_id: number; cursor_ordinal: number; has_result: boolean }>`
    SELECT e.execution_id, e.item_id, e.cursor_ordinal,
           EXISTS (SELECT 1 FROM qa_plan_execution_results r WHERE r.execution_id = e.execution_id) AS has_result
      FROM qa_plan_executions e
     WHERE e.run_id = ${runId} AND e.status = 'running' AND e.item_id = ANY(${itemIds}::integer[])
     ORDER BY e.execution_id`.execute(db);
  return rows;
}

/** S5: the executing runs that have begun settling with this item as a member (but one). */
export async function settlingRunsOfItem(db: Executor, itemId: number, exceptRunId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('deployment_run_items as m')
    .innerJoin('deployment_runs as r', 'r.run_id', 'm.run_id')
    .select('r.run_id')
    .where('m.item_id', '=', itemId)
    .where('r.status', '=', 'executing')
    .where('r.settling_at', 'is not', null)
    .where('r.run_id', '!=', exceptRunId)
    .orderBy('r.run_id')
    .execute();
  return rows.map((r) => r.run_id);
}

/** Whether the run owns any QA plan execution, of any status. */
export async function runHasExecutions(db: Executor, runId: string): Promise<boolean> {
  const row = await db
    .selectFrom('qa_plan_executions')
    .select('execution_id')
    .where('run_id', '=', runId)
    .executeTakeFirst();
  return !!row;
}

/** The run's executions still running, in id order (O4 aborts them). */
export async function liveExecutionIdsOfRun(db: Executor, runId: string): Promise<number[]> {
  const rows = await db
    .selectFrom('qa_plan_executions')
    .select('execution_id')
    .where('run_id', '=', runId)
    .where('status', '=', 'running')
    .orderBy('execution_id')
    .execute();
  return rows.map((r) => r.execution_id);
}

/** The claim an execution holds as its lease, with the machine it leases. */
export async function leaseOf(
  db: Executor,
  claimId: number,
): Promise<{ claim_id: number; released_at: Date | null; machine: string } | undefined> {
  return db
    .selectFrom('work_claims')
    .select(['claim_id', 'released_at'])
    .select(sql<string>`scope->>'test_machine'`.as('machine'))
    .where('claim_id', '=', claimId)
    .executeTakeFirst();
}
