import { Kysely, sql } from 'kysely';
import * as waitRules from './0017_wait_rules';

/**
 * Issue 13, W5 W7 W9: a wait in a test machine's line is its session's. 0017_wait_rules let any
 * user move any wait along (the hand-off runs in whoever's transaction releases the machine),
 * so a user could cancel everyone else's place by raw SQL. A user now changes another actor's
 * wait only in the moves the line makes on its own, each proven by a row the database holds:
 *
 * - W7 the hand-off: a waiting wait becomes reserved for a live reservation claim of the
 *   wait's own session on its machine (the releaser inserted it just before);
 * - W9 a cancellation whose cause is recorded: the wait's session ended or was terminated, its
 *   reserved turn's claim was released or is past its reserved_until, or the QA plan execution
 *   it waits for has ended.
 *
 * Everything else (leaving the line, consuming a turn, a grant) is the wait's own actor's.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_line_moves_wait(o qa_test_machine_waits, n qa_test_machine_waits) RETURNS boolean STABLE
      LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT (o.state = 'waiting' AND n.state = 'reserved'
              AND EXISTS (SELECT 1 FROM work_claims c
                           WHERE c.claim_id = n.claim_id AND c.target_kind = 'qa_admission' AND c.session_id = o.session_id
                             AND c.scope->>'test_machine' = o.test_machine AND c.released_at IS NULL AND c.reserved_until IS NOT NULL))
          OR (o.state IN ('waiting', 'reserved') AND n.state = 'cancelled'
              AND (EXISTS (SELECT 1 FROM sessions s
                            WHERE s.session_id = o.session_id AND (s.ended_at IS NOT NULL OR s.terminated_at IS NOT NULL))
                   OR (o.state = 'reserved'
                       AND EXISTS (SELECT 1 FROM work_claims c
                                    WHERE c.claim_id = o.claim_id
                                      AND (c.released_at IS NOT NULL OR c.reserved_until <= clock_timestamp())))
                   OR EXISTS (SELECT 1 FROM qa_plan_executions e
                               WHERE e.execution_id = o.qa_plan_execution_id AND e.status <> 'running')))
    $fn$;

    CREATE OR REPLACE FUNCTION qa_waits_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
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
      IF yoke_session_actor(OLD.session_id) IS DISTINCT FROM session_user AND NOT yoke_line_moves_wait(OLD, NEW) THEN
        PERFORM yoke_refuse('permission_denied',
          format('wait %s on %s belongs to session %s of actor %s; %s cannot change it', OLD.wait_id, OLD.test_machine,
            OLD.session_id, coalesce(yoke_session_actor(OLD.session_id), '(none)'), session_user),
          'change only your own waits (yoke test-machine waits --session S); the line serves and cancels the others itself');
      END IF;
      RETURN NEW;
    END $fn$;

    -- The backstop policy: another actor's wait only ever becomes reserved or cancelled (the
    -- trigger, firing first, names the refusal and checks the cause).
    DROP POLICY yoke_user_update ON qa_test_machine_waits;
    CREATE POLICY yoke_user_update ON qa_test_machine_waits FOR UPDATE TO yoke_user USING (true)
      WITH CHECK (yoke_session_actor(session_id) = session_user OR state IN ('reserved', 'cancelled'));
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP POLICY yoke_user_update ON qa_test_machine_waits;
    CREATE POLICY yoke_user_update ON qa_test_machine_waits FOR UPDATE TO yoke_user USING (true) WITH CHECK (true);
    DROP TRIGGER qa_test_machine_waits_authority ON qa_test_machine_waits;
    DROP FUNCTION qa_waits_authority();
  `.execute(db);
  await waitRules.up(db);
  await sql`DROP FUNCTION yoke_line_moves_wait(qa_test_machine_waits, qa_test_machine_waits)`.execute(db);
}
