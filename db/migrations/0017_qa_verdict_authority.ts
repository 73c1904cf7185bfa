import { Kysely, sql } from 'kysely';

/**
 * Issue 13: a QA plan execution's verdicts and waivers are written by the CLI under the
 * caller's own role, never by the worker from a message. The rule (R1): the actor who began
 * the execution records verdicts on its human cases (manual cases and the gate, as the plan
 * frozen on the execution says, whatever kind the row claims); anyone else, and every waiver,
 * needs the run's live driver or a steering seat on its project (strict rule of
 * yoke_run_refusal), refused with the spec's code. An automatic case's verdict is its
 * command's exit status: only the worker records it. The recording session is the caller's.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- A manual case or the gate of the plan frozen on the execution.
    CREATE FUNCTION yoke_human_case(execution integer, case_name text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM qa_plan_executions e
                      WHERE e.execution_id = execution
                        AND ((case_name = 'gate' AND coalesce(e.plan->'gate', 'null'::jsonb) <> 'null'::jsonb)
                          OR EXISTS (SELECT 1 FROM jsonb_array_elements(e.plan->'cases') c
                                      WHERE c->>'name' = case_name
                                        AND coalesce(c->'automatic', 'null'::jsonb) IN ('null'::jsonb, 'false'::jsonb))))
    $fn$;

    CREATE FUNCTION qa_results_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE run text := yoke_execution_run(NEW.execution_id);
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF NEW.recorded_by_session_id IS NULL OR yoke_session_actor(NEW.recorded_by_session_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('%s cannot record QA case %s of execution %s in the name of session %s', session_user, NEW.case_name,
            NEW.execution_id, coalesce(NEW.recorded_by_session_id, '(none)')),
          'record it with your own session: yoke qa verdict|waive EXECUTION --case C --session S');
      END IF;
      IF NEW.verdict = 'waived' THEN
        PERFORM yoke_require_run_authority(run, true, format('waive QA case %s of execution %s', NEW.case_name, NEW.execution_id));
        RETURN NEW;
      END IF;
      IF NOT yoke_human_case(NEW.execution_id, NEW.case_name) THEN
        PERFORM yoke_refuse('permission_denied',
          format('case %s of execution %s is automatic: its command''s exit status is the verdict, recorded by the worker', NEW.case_name, NEW.execution_id),
          format('watch it: yoke qa watch %s, or waive it: yoke qa waive %s --case %s --reason R', NEW.execution_id, NEW.execution_id, NEW.case_name));
      END IF;
      IF yoke_execution_actor(NEW.execution_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_require_run_authority(run, true, format('record a verdict on QA case %s of execution %s', NEW.case_name, NEW.execution_id));
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER qa_plan_execution_results_authority BEFORE INSERT ON qa_plan_execution_results
      FOR EACH ROW EXECUTE FUNCTION qa_results_authority();

    -- The backstop policy says the same (the trigger names the refusal first).
    DROP POLICY yoke_user_insert ON qa_plan_execution_results;
    CREATE POLICY yoke_user_insert ON qa_plan_execution_results FOR INSERT TO yoke_user WITH CHECK (
      yoke_session_actor(recorded_by_session_id) = session_user
      AND (verdict = 'waived' OR yoke_human_case(execution_id, case_name))
      AND ((verdict <> 'waived' AND yoke_execution_actor(execution_id) = session_user)
           OR yoke_run_refusal(yoke_execution_run(execution_id), true) IS NULL));
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP POLICY yoke_user_insert ON qa_plan_execution_results;
    CREATE POLICY yoke_user_insert ON qa_plan_execution_results FOR INSERT TO yoke_user WITH CHECK (
      yoke_session_actor(recorded_by_session_id) = session_user
      AND (verdict <> 'waived' OR yoke_run_refusal(yoke_execution_run(execution_id), true) IS NULL));
    DROP TRIGGER qa_plan_execution_results_authority ON qa_plan_execution_results;
    DROP FUNCTION qa_results_authority(), yoke_human_case(integer, text);
  `.execute(db);
}
