import { Kysely, sql } from 'kysely';

/**
 * Issue 16, execute: the origin locks and the occupancy check in one round trip (O1-O3).
 *
 * `yoke_lock_origins` takes the transaction-scoped advisory lock of every origin, in the order
 * given (the caller sorts them, as every path that locks origins does), then returns the run
 * that holds the first occupied one, if any: an executing run, or a created successor holding
 * what it took over (T2), whose occupancy is not released. VOLATILE plpgsql, so the check is a
 * statement of its own that sees everything committed before the last lock was granted; in
 * one plain SELECT the snapshot would predate the locks.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_lock_origins(executing_run text, origins text[])
      RETURNS TABLE (unit text, run_id text, current_stage text, project text)
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
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
         WHERE o.unit = ANY (origins)
           AND (r.status = 'executing' OR (r.status = 'created' AND r.supersedes_run_id IS NOT NULL))
           AND r.occupancy_released_at IS NULL
           AND r.run_id <> executing_run
         ORDER BY o.unit
         LIMIT 1;
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP FUNCTION yoke_lock_origins(text, text[])`.execute(db);
}
