import { Kysely, sql } from 'kysely';

/**
 * Issue 16 review, O1/O2: the occupancy check reads on one snapshot again.
 *
 * 0022 read the live occupancy rows in one statement and each holder's run in another, so each
 * on its own snapshot. A takeover moves an origin's occupancy from the predecessor to its
 * successor in one commit without taking the origin's advisory lock; committed between those
 * two reads, it left the check seeing the predecessor's row (no longer occupying) and not the
 * successor's (not in the first snapshot): no holder, and two runs on one origin. One statement
 * sees the takeover wholly or not at all: the predecessor or the successor refuses. Still a
 * statement of its own after every lock is granted, still started from the partial index over
 * live rows (so it does not grow with an origin's history), and planned once (a generic plan:
 * the origins differ per call, the plan does not).
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
        SELECT o.unit, r.run_id, r.current_stage, p.name
          FROM deployment_run_occupancy o
          JOIN deployment_runs r ON r.run_id = o.run_id
          JOIN projects p ON p.project_id = r.project_id
         WHERE o.unit = ANY (origins) AND o.live AND o.run_id <> executing_run
           AND yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at)
         ORDER BY o.unit
         LIMIT 1;
    END $fn$;
  `.execute(db);
}

/** Back to 0022's check (a lookup per live row), with the settings 0022_execute_targeted_reads gave it. */
export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION yoke_lock_origins(executing_run text, origins text[])
      RETURNS TABLE (unit text, run_id text, current_stage text, project text)
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp SET enable_seqscan = off
      SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan AS $fn$
    #variable_conflict use_column
    DECLARE origin text; held record;
    BEGIN
      FOREACH origin IN ARRAY origins LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('occupancy:' || origin, 0));
      END LOOP;
      FOR held IN SELECT o.unit, o.run_id FROM deployment_run_occupancy o
                   WHERE o.unit = ANY (origins) AND o.live AND o.run_id <> executing_run ORDER BY o.unit LOOP
        RETURN QUERY
          SELECT held.unit, r.run_id, r.current_stage, p.name
            FROM deployment_runs r JOIN projects p ON p.project_id = r.project_id
           WHERE r.run_id = held.run_id AND yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at);
        IF FOUND THEN RETURN; END IF;
      END LOOP;
    END $fn$;
  `.execute(db);
}
