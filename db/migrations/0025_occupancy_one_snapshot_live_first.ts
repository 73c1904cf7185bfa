import { Kysely, sql } from 'kysely';
import * as occupancyOneSnapshot from './0025_occupancy_one_snapshot';

/**
 * Issue 16, O1/O2: the one-statement occupancy check of 0025_occupancy_one_snapshot starts from
 * the live rows of the origins. Planned as a plain join, the check was driven from
 * deployment_runs instead (a scan of every run of every origin, whatever its state, measured on
 * the bench's database even after ANALYZE), so it grew with all history. The run and its
 * project are now a LATERAL lookup per live row that cannot be pulled up (OFFSET 0): the
 * partial index over live rows comes first, each row's run by its key after. Still one
 * statement after every lock is granted, so one snapshot, and one generic plan.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION yoke_lock_origins(executing_run text, origins text[])
      RETURNS TABLE (unit text, run_id text, current_stage text, project text)
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp SET enable_seqscan = off
      SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan AS $fn$
    #variable_conflict use_column
    DECLARE origin text;
    BEGIN
      FOREACH origin IN ARRAY origins LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('occupancy:' || origin, 0));
      END LOOP;
      RETURN QUERY
        SELECT o.unit, h.run_id, h.current_stage, h.project
          FROM deployment_run_occupancy o
          CROSS JOIN LATERAL (
            SELECT r.run_id, r.current_stage, p.name AS project
              FROM deployment_runs r JOIN projects p ON p.project_id = r.project_id
             WHERE r.run_id = o.run_id AND yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at)
            OFFSET 0) h
         WHERE o.unit = ANY (origins) AND o.live AND o.run_id <> executing_run
         ORDER BY o.unit
         LIMIT 1;
    END $fn$;
  `.execute(db);
}

/** The check as 0025_occupancy_one_snapshot wrote it. */
export async function down(db: Kysely<any>): Promise<void> {
  await occupancyOneSnapshot.up(db);
}
