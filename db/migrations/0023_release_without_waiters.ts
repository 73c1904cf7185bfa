import { Kysely, sql } from 'kysely';
import * as releaseServesLine from './0019_release_serves_line';

/**
 * Issue 16, claims: a release nobody waits for pays nothing for serving the line.
 *
 * `yoke_release_serving_line` (0019_release_serves_line) ran, for every test machine release,
 * the W9 existence check, then `test_machine_unhealthy` and the search for the oldest waiter
 * even when its line was empty. One query now answers both questions the release asks of the
 * line, under the line's lock as before: is there a wait the full path must handle (a reserved
 * turn, or a wait of an ended session: W9), and is anyone live waiting. With nobody waiting,
 * the health check and the waiter search are skipped; the reservation they lead to is the same
 * (W7, W8). Joins insert waits only under the line's lock (activities/waitingLine.ts joinLine),
 * so the answer cannot change before the function returns.
 *
 * Both line functions also declare how many rows they return (at most 2 and 1): the planner
 * assumed 1000, and joined the release's result to sessions, items and projects by hashing
 * each table whole, on every release.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION yoke_release_serving_line(claim integer, acting text, reason text, lifetime_ms double precision)
      RETURNS TABLE (claim_row work_claims, wait_id integer)
      VOLATILE LANGUAGE plpgsql ROWS 2 SET search_path = public, pg_temp AS $fn$
    DECLARE c work_claims; r work_claims; acting_actor text; machine text; w record;
            unusual boolean := false; waiting boolean := false;
    BEGIN
      -- The line before the claim row: the lock order of every path (db/waits.ts).
      PERFORM pg_advisory_xact_lock(hashtextextended('qa_line:' || (x.scope->>'test_machine'), 0))
         FROM work_claims x WHERE x.claim_id = claim AND x.target_kind = 'qa_admission';
      SELECT * INTO c FROM work_claims x WHERE x.claim_id = claim FOR UPDATE;
      IF NOT FOUND OR c.released_at IS NOT NULL OR c.reserved_until IS NOT NULL THEN RETURN; END IF;
      SELECT s.actor_id INTO acting_actor FROM sessions s
       WHERE s.session_id = acting AND s.ended_at IS NULL AND s.terminated_at IS NULL;
      IF acting_actor IS NULL THEN RETURN; END IF;
      IF c.session_id <> acting
         AND NOT EXISTS (SELECT 1 FROM sessions h WHERE h.session_id = c.session_id AND h.actor_id = acting_actor) THEN
        RETURN;
      END IF;
      IF c.target_kind = 'qa_admission' THEN
        machine := c.scope->>'test_machine';
        -- W9: waits of ended sessions are cancelled, and a reserved wait is unusual: the full path.
        SELECT coalesce(bool_or(x.state = 'reserved' OR s.ended_at IS NOT NULL OR s.terminated_at IS NOT NULL), false),
               coalesce(bool_or(x.state = 'waiting'), false)
          INTO unusual, waiting
          FROM qa_test_machine_waits x JOIN sessions s ON s.session_id = x.session_id
         WHERE x.test_machine = machine AND x.state IN ('waiting', 'reserved');
        IF unusual THEN RETURN; END IF;
      END IF;
      UPDATE work_claims x
         SET released_at = clock_timestamp(), release_reason = reason,
             released_by_session_id = acting, released_by_actor_id = acting_actor
       WHERE x.claim_id = claim
      RETURNING x.* INTO c;
      claim_row := c; wait_id := NULL;
      RETURN NEXT;
      IF NOT waiting OR test_machine_unhealthy(machine) THEN RETURN; END IF;  -- nobody to serve, or W8
      SELECT x.wait_id AS id, x.session_id, x.qa_plan_execution_id, s.project_id INTO w
        FROM qa_test_machine_waits x JOIN sessions s ON s.session_id = x.session_id
       WHERE x.test_machine = machine AND x.state = 'waiting'
       ORDER BY x.queued_at, x.wait_id
       LIMIT 1;
      IF NOT FOUND THEN RETURN; END IF;
      INSERT INTO work_claims (target_kind, scope, key, project_id, session_id, qa_plan_execution_id, reserved_until)
      VALUES ('qa_admission', jsonb_build_object('test_machine', machine), 'QA_HOST:' || machine, w.project_id,
              w.session_id, w.qa_plan_execution_id, clock_timestamp() + make_interval(secs => lifetime_ms / 1000))
      ON CONFLICT DO NOTHING
      RETURNING * INTO r;
      IF r.claim_id IS NULL THEN RETURN; END IF;  -- taken meanwhile by an acquirer outside the line
      UPDATE qa_test_machine_waits x SET state = 'reserved', claim_id = r.claim_id, settled_at = NULL, cancel_reason = NULL
       WHERE x.wait_id = w.id;
      claim_row := r; wait_id := w.id;
      RETURN NEXT;
    END $fn$;

    ALTER FUNCTION yoke_consume_reservation(text, text, integer) ROWS 1;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  // 0019_release_serves_line's definitions, as they were.
  await sql`
    DROP FUNCTION yoke_consume_reservation(text, text, integer);
    DROP FUNCTION yoke_release_serving_line(integer, text, text, double precision);
  `.execute(db);
  await releaseServesLine.up(db);
}
