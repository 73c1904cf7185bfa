import { sql } from 'kysely';
import type { RunRow } from './database';
import type { Executor } from './pool';

/** A run's settlement marks on deployment_runs (S1, S2, S6): settling, committed, blocked, succeeded. */

/** S1: records settling_at once (a replay keeps the first) and leaves the stage cursor. */
export async function markSettling(db: Executor, runId: string): Promise<Date> {
  const row = await db
    .updateTable('deployment_runs')
    .set({ settling_at: sql`coalesce(settling_at, clock_timestamp())`, current_stage: null })
    .where('run_id', '=', runId)
    .returning('settling_at')
    .executeTakeFirstOrThrow();
  return row.settling_at!;
}

/** The run's status and commit mark under its row lock: the commit happens once. */
export async function lockSettlementState(
  db: Executor,
  runId: string,
): Promise<Pick<RunRow, 'status' | 'settlement_committed_at'>> {
  return db
    .selectFrom('deployment_runs')
    .select(['status', 'settlement_committed_at'])
    .where('run_id', '=', runId)
    .forUpdate()
    .executeTakeFirstOrThrow();
}

/** S2: the commit happened; the last refusal it replaces is cleared. */
export async function markSettlementCommitted(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({ settlement_committed_at: sql`clock_timestamp()`, settlement_blocked: null })
    .where('run_id', '=', runId)
    .execute();
}

/** The last refusal stays readable on the run (get, watch) until a commit clears it. */
export async function recordSettlementBlocked(db: Executor, runId: string, refusal: object): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({ settlement_blocked: JSON.stringify(refusal) })
    .where('run_id', '=', runId)
    .execute();
}

/** The run succeeded; a terminal run never occupies (yoke doctor: no_terminal_run_occupies). */
export async function markSucceeded(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({
      status: 'succeeded',
      terminal_at: sql`clock_timestamp()`,
      current_stage: null,
      occupancy_released_at: sql`coalesce(occupancy_released_at, clock_timestamp())`,
    })
    .where('run_id', '=', runId)
    .execute();
}

/** What a closing run's attribution names: its project and its target environment. */
export async function closingNames(
  db: Executor,
  run: Pick<RunRow, 'target_environment_id'>,
): Promise<{ project: string; environment: string }> {
  return db
    .selectFrom('projects as p')
    .innerJoin('environments as e', 'e.project_id', 'p.project_id')
    .select(['p.name as project', 'e.name as environment'])
    .where('e.environment_id', '=', run.target_environment_id)
    .executeTakeFirstOrThrow();
}
