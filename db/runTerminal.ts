import { sql } from 'kysely';
import type { Executor } from './pool';

/** O4: a run ends failed or cancelled in one transaction, and a failed run restarts (retry). */

/** The terminal status; a terminal run no longer occupies its origins. */
export async function markRunTerminal(
  db: Executor,
  runId: string,
  disposition: 'cancelled' | 'failed',
  reason: string,
): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({
      status: disposition,
      terminal_at: sql`clock_timestamp()`,
      terminal_reason: reason,
      occupancy_released_at: sql`coalesce(occupancy_released_at, clock_timestamp())`,
    })
    .where('run_id', '=', runId)
    .execute();
}

/** The stages that had not finished are cancelled. */
export async function cancelUnfinishedStages(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_run_stages')
    .set({ status: 'cancelled', finished_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('status', 'in', ['pending', 'running', 'waiting'])
    .execute();
}

/** The unsettled run requirements are retracted automatically; returns their names. */
export async function retractUnsettledRequirements(db: Executor, runId: string): Promise<string[]> {
  const rows = await db
    .updateTable('deployment_run_qa')
    .set({ retracted_at: sql`clock_timestamp()`, retraction: 'automatic', updated_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('status', '=', 'pending')
    .where('retracted_at', 'is', null)
    .returning('check_name')
    .execute();
  return rows.map((r) => r.check_name);
}

/** Retry: the automatic retractions are restored. */
export async function restoreAutomaticRetractions(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_run_qa')
    .set({ retracted_at: null, retraction: null, updated_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('retraction', '=', 'automatic')
    .execute();
}

/** Retry: every stage that did not pass is pending again. */
export async function resetUnpassedStages(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_run_stages')
    .set({ status: 'pending', started_at: null, finished_at: null, detail: null })
    .where('run_id', '=', runId)
    .where('status', 'in', ['failed', 'cancelled', 'running', 'waiting'])
    .execute();
}
