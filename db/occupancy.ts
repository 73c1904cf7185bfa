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

/**
 * The occupancy check reads only rows marked live (0022); a row of an occupying run marked
 * otherwise would be a holder the check cannot see (yoke doctor names it). Marks the run's rows
 * as its state says.
 */
export async function markOccupancyLive(db: Executor, runId: string): Promise<void> {
  await sql`
    UPDATE deployment_run_occupancy o
       SET live = yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at)
      FROM deployment_runs r
     WHERE r.run_id = o.run_id AND o.run_id = ${runId}
       AND o.live IS DISTINCT FROM yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at)`.execute(
    db,
  );
}

/** O1: a run whose QA stages have settled stops occupying its origins. */
export async function releaseOccupancy(db: Executor, runId: string): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({ occupancy_released_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .execute();
}
