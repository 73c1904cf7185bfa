import { Kysely, sql } from 'kysely';
import * as releaseWithoutWaiters from './0023_release_without_waiters';

/**
 * Issue 16, claims: the service's acquire and release stop paying for rules that are not theirs.
 *
 * 1. The four work_claims triggers (0029_settlement_user_role, 0027_authority_holes) hold users
 *    to their rules; for the service (admin or worker role) each did nothing, but Postgres still
 *    called a plpgsql function per row, and planned every trigger's WHEN clause on every
 *    statement: inlining yoke_is_service() parses its SQL body each time. The triggers now fire
 *    only for users, and the WHEN clauses name the two role checks directly (the same test as
 *    yoke_is_service()), so a service statement prepares a small expression and calls nothing.
 *    Profiled on the bench's pair, this was a sixth of the backend's time.
 * 2. yoke_release_serving_line reads the claim, the acting session and the line in the release's
 *    own UPDATE instead of four statements before it (the row lock of a SELECT ... FOR UPDATE is
 *    the UPDATE's own). The line's lock is still taken first, in its own statement, so the UPDATE's
 *    snapshot sees every wait a join inserted under it (activities/waitingLine.ts joinLine).
 *    What the release answers is unchanged: nothing when the claim is gone, released, a reserved
 *    turn, held by another actor, or its line has a wait the full path handles (W9).
 */
const user = sql.raw(
  `NOT (pg_catalog.pg_has_role(session_user, 'yoke_admin', 'MEMBER') OR pg_catalog.pg_has_role(session_user, 'yoke_worker', 'MEMBER'))`,
);

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER work_claims_authority ON work_claims;
    CREATE TRIGGER work_claims_authority BEFORE INSERT ON work_claims FOR EACH ROW
      WHEN (${user}) EXECUTE FUNCTION work_claims_authority();
    DROP TRIGGER work_claims_authority_update ON work_claims;
    CREATE TRIGGER work_claims_authority_update BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${user} AND NOT yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_authority();
    DROP TRIGGER work_claims_delivered_release ON work_claims;
    CREATE TRIGGER work_claims_delivered_release BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${user} AND yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_delivered_release();
    DROP TRIGGER work_claims_operator_event ON work_claims;
    CREATE TRIGGER work_claims_operator_event BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${user}) EXECUTE FUNCTION work_claims_operator_event();

    CREATE OR REPLACE FUNCTION yoke_release_serving_line(claim integer, acting text, reason text, lifetime_ms double precision)
      RETURNS TABLE (claim_row work_claims, wait_id integer)
      VOLATILE LANGUAGE plpgsql ROWS 2 SET search_path = public, pg_temp AS $fn$
    DECLARE released record; r work_claims; machine text; w record;
    BEGIN
      -- The line before the claim row: the lock order of every path (db/waits.ts).
      PERFORM pg_advisory_xact_lock(hashtextextended('qa_line:' || (x.scope->>'test_machine'), 0))
         FROM work_claims x WHERE x.claim_id = claim AND x.target_kind = 'qa_admission';
      WITH acting_session AS (
             SELECT s.actor_id FROM sessions s
              WHERE s.session_id = acting AND s.ended_at IS NULL AND s.terminated_at IS NULL),
           -- W9: a reserved turn or a wait of an ended session is the full path's; else, is anyone waiting
           line AS (
             SELECT coalesce(bool_or(x.state = 'reserved' OR s.ended_at IS NOT NULL OR s.terminated_at IS NOT NULL), false) AS unusual,
                    coalesce(bool_or(x.state = 'waiting'), false) AS waiting
               FROM work_claims k
               JOIN qa_test_machine_waits x ON x.test_machine = k.scope->>'test_machine' AND x.state IN ('waiting', 'reserved')
               JOIN sessions s ON s.session_id = x.session_id
              WHERE k.claim_id = claim AND k.target_kind = 'qa_admission')
      UPDATE work_claims x
         SET released_at = clock_timestamp(), release_reason = reason,
             released_by_session_id = acting, released_by_actor_id = a.actor_id
        FROM acting_session a, line
       WHERE x.claim_id = claim AND x.released_at IS NULL AND x.reserved_until IS NULL AND NOT line.unusual
         AND (x.session_id = acting
              OR EXISTS (SELECT 1 FROM sessions h WHERE h.session_id = x.session_id AND h.actor_id = a.actor_id))
      RETURNING x AS claim_row, line.waiting INTO released;
      IF NOT FOUND THEN RETURN; END IF;
      claim_row := released.claim_row; wait_id := NULL;
      RETURN NEXT;
      machine := claim_row.scope->>'test_machine';
      IF NOT released.waiting OR test_machine_unhealthy(machine) THEN RETURN; END IF;  -- nobody to serve, or W8
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
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER work_claims_authority ON work_claims;
    CREATE TRIGGER work_claims_authority BEFORE INSERT ON work_claims FOR EACH ROW EXECUTE FUNCTION work_claims_authority();
    DROP TRIGGER work_claims_authority_update ON work_claims;
    CREATE TRIGGER work_claims_authority_update BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_is_service() OR NOT yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_authority();
    DROP TRIGGER work_claims_delivered_release ON work_claims;
    CREATE TRIGGER work_claims_delivered_release BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (NOT yoke_is_service() AND yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_delivered_release();
    DROP TRIGGER work_claims_operator_event ON work_claims;
    CREATE TRIGGER work_claims_operator_event BEFORE UPDATE ON work_claims FOR EACH ROW EXECUTE FUNCTION work_claims_operator_event();
  `.execute(db);
  await releaseWithoutWaiters.up(db); // yoke_release_serving_line as 0023 defined it
}
