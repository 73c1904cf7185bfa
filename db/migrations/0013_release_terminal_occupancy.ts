import { Kysely, sql } from 'kysely';

/**
 * Migration 0007 began recording occupancy releases on every terminal run, but runs that had
 * already ended before it kept occupancy_released_at NULL: `yoke doctor` named them as
 * terminal runs still occupying their origins, and every read that trusts the column treated
 * them as holders. A terminal run holds nothing: release them at the time they ended.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    UPDATE deployment_runs
       SET occupancy_released_at = coalesce(terminal_at, clock_timestamp())
     WHERE status IN ('succeeded', 'failed', 'cancelled')
       AND occupancy_released_at IS NULL;
  `.execute(db);
}

export async function down(): Promise<void> {
  // A backfill of facts: nothing to undo (the released runs had ended).
}
