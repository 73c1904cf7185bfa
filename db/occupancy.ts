import { sql } from 'kysely';
import type { Executor } from './pool';

/** A run's occupancy (deployment_run_occupancy, O1): the origin units it holds. */

/** The units the run holds, by name. */
export async function occupancyUnitsOf(db: Executor, runId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('deployment_run_occupancy')
    .select('unit')
    .where('run_id', '=', runId)
    .orderBy('unit')
    .execute();
  return rows.map((r) => r.unit);
}

/** A terminal run never occupies: marks what a fault left behind released (yoke doctor names it). */
export async function releaseTerminalOccupancy(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({ occupancy_released_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('occupancy_released_at', 'is', null)
    .execute();
}

/** O1: a run whose QA stages have settled stops occupying its origins. */
export async function releaseOccupancy(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({ occupancy_released_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .execute();
}
