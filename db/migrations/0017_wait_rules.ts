import { Kysely, sql } from 'kysely';

/**
 * Issue 13, W5 W7 W9 in the database: any user's transaction may hand the waiting line on (the
 * release that reserves, grants, expires or cancels a turn runs as whoever released the
 * machine), but a wait keeps its machine, its session and actor, and its place in line
 * (queued_at, W5), and a settled wait (granted, cancelled) is history nobody but admins and
 * the worker rewrite.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION qa_waits_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF (NEW.wait_id, NEW.test_machine, NEW.session_id, NEW.actor_id, NEW.queued_at, NEW.qa_plan_execution_id,
          NEW.resume_command, NEW.rationale)
         IS DISTINCT FROM (OLD.wait_id, OLD.test_machine, OLD.session_id, OLD.actor_id, OLD.queued_at,
          OLD.qa_plan_execution_id, OLD.resume_command, OLD.rationale) THEN
        PERFORM yoke_refuse('permission_denied',
          format('wait %s of session %s on %s keeps its machine, session and place in line', OLD.wait_id, OLD.session_id, OLD.test_machine),
          'leave the line (yoke test-machine waits) and join it again');
      END IF;
      IF OLD.state IN ('granted', 'cancelled') AND (NEW.state, NEW.claim_id, NEW.settled_at, NEW.cancel_reason)
         IS DISTINCT FROM (OLD.state, OLD.claim_id, OLD.settled_at, OLD.cancel_reason) THEN
        PERFORM yoke_refuse('permission_denied', format('wait %s is settled (%s)', OLD.wait_id, OLD.state),
          'join the line again: yoke coordination-claim acquire --key QA_HOST:' || OLD.test_machine || ' --wait');
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER qa_test_machine_waits_authority BEFORE UPDATE ON qa_test_machine_waits
      FOR EACH ROW EXECUTE FUNCTION qa_waits_authority();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER qa_test_machine_waits_authority ON qa_test_machine_waits;
    DROP FUNCTION qa_waits_authority();
  `.execute(db);
}
