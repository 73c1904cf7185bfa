import { Kysely, sql } from 'kysely';

/**
 * Issue 16, hand-off: the release that has someone waiting serves the line in its own
 * statement too, and the waiter's next acquire consumes its turn in one.
 *
 * `yoke_release_serving_line` replaces 0019_one_statement_release's holder release (left unused),
 * now also for a
 * test machine with live waiters: in the same statement (so the same transaction), it
 * reserves the machine for the oldest waiting session whose session has not ended (W7),
 * unless the machine is unhealthy (W8: then it only releases). It returns the released claim
 * and, when it reserved, the reserved turn with its wait. No row means the full path decides:
 * a reserved turn released (W9), waits of ended sessions to cancel (W9), refusals, operators.
 *
 * `yoke_consume_reservation` is the waiter's acquire of its reserved turn (W7): under the
 * line's lock, its live, unexpired reservation becomes its hold and its wait is granted.
 *
 * Both are VOLATILE plpgsql for the reason 0019_one_statement_release gives: each statement
 * after the line's lock sees everything committed before it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_release_serving_line(claim integer, acting text, reason text, lifetime_ms double precision)
      RETURNS TABLE (claim_row work_claims, wait_id integer)
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE c work_claims; r work_claims; acting_actor text; machine text; w record;
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
        IF EXISTS (SELECT 1 FROM qa_test_machine_waits x JOIN sessions s ON s.session_id = x.session_id
                    WHERE x.test_machine = machine AND x.state IN ('waiting', 'reserved')
                      AND (x.state = 'reserved' OR s.ended_at IS NOT NULL OR s.terminated_at IS NOT NULL)) THEN
          RETURN;
        END IF;
      END IF;
      UPDATE work_claims x
         SET released_at = clock_timestamp(), release_reason = reason,
             released_by_session_id = acting, released_by_actor_id = acting_actor
       WHERE x.claim_id = claim
      RETURNING x.* INTO c;
      claim_row := c; wait_id := NULL;
      RETURN NEXT;
      IF machine IS NULL OR test_machine_unhealthy(machine) THEN RETURN; END IF;  -- W8
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

    CREATE FUNCTION yoke_consume_reservation(machine text, acting text, execution integer)
      RETURNS SETOF work_claims
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE c work_claims;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtextextended('qa_line:' || machine, 0));
      SELECT * INTO c FROM work_claims x
       WHERE x.target_kind = 'qa_admission' AND x.scope->>'test_machine' = machine AND x.released_at IS NULL
         AND x.session_id = acting AND x.reserved_until > clock_timestamp()
         AND (execution IS NULL OR x.qa_plan_execution_id IS NULL OR x.qa_plan_execution_id = execution)
         AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = acting AND s.ended_at IS NULL AND s.terminated_at IS NULL)
       FOR UPDATE;
      IF NOT FOUND THEN RETURN; END IF;
      UPDATE qa_test_machine_waits x SET state = 'granted', settled_at = clock_timestamp(), cancel_reason = NULL
       WHERE x.claim_id = c.claim_id AND x.state = 'reserved';
      RETURN QUERY UPDATE work_claims x SET reserved_until = NULL, heartbeat_at = now()
                    WHERE x.claim_id = c.claim_id
                RETURNING x.*;
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP FUNCTION yoke_consume_reservation(text, text, integer);
    DROP FUNCTION yoke_release_serving_line(integer, text, text, double precision);
  `.execute(db);
}
