import { Kysely, sql } from 'kysely';

/**
 * Issue 13, rules a third audit found a user could skip by raw SQL under their own
 * DATABASE_URL (each the CLI's rule, now also the database's):
 *
 * - C11, C12: a released claim is history. Its holder could set `released_at` back to NULL,
 *   erasing an operator's permanent release reason and taking the stranded lease back, or
 *   rewrite who released it and why. A user now changes none of a released claim's release
 *   columns (a late heartbeat on it stays harmless).
 * - C3, C12, W2: taking a claim. A user could insert one for an ended session of theirs
 *   (`session_ended`), a retired `deploy_serialization` hold (`deploy_lock_retired`), a QA
 *   host hold on an unregistered machine (`test_machine_unknown`), one born released, and a
 *   QA host hold on an unhealthy machine (`test_machine_unhealthy`: only the worker's
 *   verification takes one, W8), a plain hold ahead of another session's live wait, and a
 *   reserved turn for anyone but the line's oldest live waiter (`claim_held`: a user could
 *   reserve a free machine for a friend further back, or for itself, skipping the line).
 * - Sessions: an ended or terminated session stays ended; its owner could set `ended_at` back
 *   to NULL and act from it again (the CLI refuses `session_ended`).
 * - QA plan executions (the rule that an automatic case's verdict is the worker's): whoever
 *   began an execution could rewrite its plan (drop the automatic case and host reset), set it
 *   passed, or insert one born passed, with no authority on the run. A user now changes none
 *   of what it began with, never sets passed or failed (its walk does, in the worker), and moves
 *   it to another run only with authority on its run (a takeover).
 * - Runs: a create by an actor who may not deploy the project failed on the bare row-security
 *   message; it is now refused `permission_denied` naming the `runs.deploy` grant and the
 *   steering seat, for the CLI and raw SQL alike.
 *
 * New trigger functions beside the existing ones (none is restated), firing for users only,
 * with the same WHEN test as 0034_lean_claim_path.
 */
const user = sql.raw(
  `NOT (pg_catalog.pg_has_role(session_user, 'yoke_admin', 'MEMBER') OR pg_catalog.pg_has_role(session_user, 'yoke_worker', 'MEMBER'))`,
);

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION work_claims_history_kept() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF (NEW.released_at, NEW.release_reason, NEW.released_by_session_id, NEW.released_by_actor_id, NEW.reserved_until)
         IS DISTINCT FROM (OLD.released_at, OLD.release_reason, OLD.released_by_session_id, OLD.released_by_actor_id, OLD.reserved_until) THEN
        PERFORM yoke_refuse_with('permission_denied',
          format('claim %s was released at %s (%s); a released claim is history and is never changed or taken back',
            OLD.claim_id, OLD.released_at, OLD.release_reason),
          'take a new claim: yoke coordination-claim acquire --key KEY (or yoke claims item take / steering take)',
          jsonb_build_object('claim_id', OLD.claim_id, 'released_at', OLD.released_at, 'release_reason', OLD.release_reason));
      END IF;
      RETURN NEW;
    END $fn$;

    CREATE FUNCTION work_claims_take_rules() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE s sessions; machine text; oldest record;
    BEGIN
      SELECT * INTO s FROM sessions WHERE session_id = NEW.session_id;
      IF FOUND AND (s.ended_at IS NOT NULL OR s.terminated_at IS NOT NULL) THEN
        PERFORM yoke_refuse_with('session_ended',
          format('session %s ended at %s (%s)', s.session_id, coalesce(s.ended_at, s.terminated_at), s.end_reason),
          'register a new session id and act from it',
          jsonb_build_object('session_id', s.session_id, 'ended_at', coalesce(s.ended_at, s.terminated_at), 'end_reason', s.end_reason));
      END IF;
      IF NEW.released_at IS NOT NULL OR NEW.released_by_session_id IS NOT NULL OR NEW.released_by_actor_id IS NOT NULL THEN
        PERFORM yoke_refuse_with('permission_denied', 'a claim is taken live; only its release records released_at',
          'take the claim, then release it: yoke claims work release --claim-id N --reason R', '{}'::jsonb);
      END IF;
      IF NEW.target_kind = 'deploy_serialization' THEN
        PERFORM yoke_refuse_with('deploy_lock_retired',
          format('%s names the retired per-project deploy lock; deployment runs take no coordination claim', coalesce(NEW.key, 'DEPLOY:')),
          'runs serialize by the target origins they occupy (yoke deployment-runs execute RUN)',
          jsonb_build_object('key', NEW.key));
      END IF;
      IF NEW.target_kind <> 'qa_admission' THEN RETURN NEW; END IF;
      machine := NEW.scope->>'test_machine';
      IF machine IS NULL OR NOT EXISTS (SELECT 1 FROM test_machines m WHERE m.name = machine) THEN
        PERFORM yoke_refuse_with('test_machine_unknown',
          format('no test machine is named %s (machine names are case-insensitive)', coalesce(machine, '(none)')),
          'add it first: yoke test-machine add NAME --host H --port P --user U --credential NAME (see yoke test-machine list)',
          jsonb_build_object('test_machine', machine));
      END IF;
      IF test_machine_unhealthy(machine) THEN
        PERFORM yoke_refuse_with('test_machine_unhealthy',
          format('test machine %s is unhealthy: its line waits until a verification passes', machine),
          format('join its line: yoke coordination-claim acquire --key QA_HOST:%s --wait, or verify it: yoke test-machine verify %s', machine, machine),
          jsonb_build_object('test_machine', machine));
      END IF;
      SELECT w.session_id, w.qa_plan_execution_id INTO oldest
        FROM qa_test_machine_waits w JOIN sessions ws ON ws.session_id = w.session_id
       WHERE w.test_machine = machine AND w.state = 'waiting' AND ws.ended_at IS NULL AND ws.terminated_at IS NULL
       ORDER BY w.queued_at, w.wait_id
       LIMIT 1;
      -- W7: a reserved turn is the line's hand-off to its oldest live waiter, whoever releases.
      IF NEW.reserved_until IS NOT NULL
         AND (oldest.session_id IS DISTINCT FROM NEW.session_id
              OR oldest.qa_plan_execution_id IS DISTINCT FROM NEW.qa_plan_execution_id) THEN
        PERFORM yoke_refuse_with('claim_held',
          format('a reserved turn on %s goes to its oldest live waiter (%s), not to session %s', machine,
            coalesce(oldest.session_id, 'nobody waits'), NEW.session_id),
          format('join the line: yoke coordination-claim acquire --key QA_HOST:%s --wait', machine),
          jsonb_build_object('test_machine', machine, 'oldest_waiter_session_id', oldest.session_id));
      END IF;
      -- W4: a plain hold goes ahead of no other session's live wait.
      IF NEW.reserved_until IS NULL AND EXISTS (
           SELECT 1 FROM qa_test_machine_waits w JOIN sessions ws ON ws.session_id = w.session_id
            WHERE w.test_machine = machine AND w.state = 'waiting' AND w.session_id <> NEW.session_id
              AND ws.ended_at IS NULL AND ws.terminated_at IS NULL) THEN
        PERFORM yoke_refuse_with('claim_held',
          format('test machine %s has a waiting line; its next turn goes to the oldest waiter', machine),
          format('join the line: yoke coordination-claim acquire --key QA_HOST:%s --wait', machine),
          jsonb_build_object('test_machine', machine));
      END IF;
      RETURN NEW;
    END $fn$;

    CREATE FUNCTION sessions_end_kept() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF (NEW.ended_at, NEW.terminated_at, NEW.end_reason) IS DISTINCT FROM (OLD.ended_at, OLD.terminated_at, OLD.end_reason) THEN
        PERFORM yoke_refuse_with('session_ended',
          format('session %s ended at %s (%s); an ended session stays ended', OLD.session_id,
            coalesce(OLD.ended_at, OLD.terminated_at), OLD.end_reason),
          'register a new session id and act from it',
          jsonb_build_object('session_id', OLD.session_id, 'ended_at', coalesce(OLD.ended_at, OLD.terminated_at), 'end_reason', OLD.end_reason));
      END IF;
      RETURN NEW;
    END $fn$;

    CREATE FUNCTION qa_executions_kept() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF (NEW.stage_name, NEW.plan_id, NEW.item_id, NEW.plan, NEW.session_id, NEW.target_environment, NEW.target_url,
          NEW.served_revision_path, NEW.delivered_commit, NEW.observed_commit, NEW.revision_check, NEW.began_at)
         IS DISTINCT FROM (OLD.stage_name, OLD.plan_id, OLD.item_id, OLD.plan, OLD.session_id, OLD.target_environment,
          OLD.target_url, OLD.served_revision_path, OLD.delivered_commit, OLD.observed_commit, OLD.revision_check, OLD.began_at) THEN
        PERFORM yoke_refuse_with('permission_denied',
          format('QA plan execution %s keeps the plan, stage, runner and start identity it began with', OLD.execution_id),
          'abort it (yoke qa abort) and begin a new one (yoke qa begin)',
          jsonb_build_object('execution_id', OLD.execution_id));
      END IF;
      IF NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('passed', 'failed') THEN
        PERFORM yoke_refuse_with('permission_denied',
          format('QA plan execution %s passes or fails only by its walk of the recorded cases (the worker), not by a write', OLD.execution_id),
          format('record the case verdicts: yoke qa verdict %s --case NAME --verdict passed|failed', OLD.execution_id),
          jsonb_build_object('execution_id', OLD.execution_id, 'status', NEW.status));
      END IF;
      IF NEW.run_id IS DISTINCT FROM OLD.run_id AND yoke_run_refusal(OLD.run_id, false) IS NOT NULL THEN
        PERFORM yoke_refuse_with(yoke_run_refusal(OLD.run_id, false),
          format('QA plan execution %s moves to another run only by a takeover from one who may act on run %s (R1)', OLD.execution_id, OLD.run_id),
          format('yoke deployment-runs takeover %s --successor RUN', OLD.run_id),
          jsonb_build_object('execution_id', OLD.execution_id, 'run_id', OLD.run_id));
      END IF;
      RETURN NEW;
    END $fn$;

    CREATE FUNCTION qa_executions_begin_running() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF NEW.status <> 'running' OR NEW.ended_at IS NOT NULL THEN
        PERFORM yoke_refuse_with('permission_denied', 'a QA plan execution begins running; its walk of the cases ends it',
          'begin it: yoke qa begin --run RUN --stage STAGE --plan PLAN', '{}'::jsonb);
      END IF;
      RETURN NEW;
    END $fn$;

    -- Before the row-security check, so the refusal names the way in rather than the policy.
    CREATE FUNCTION deployment_runs_create_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE project text;
    BEGIN
      IF yoke_may_deploy(NEW.project_id) THEN RETURN NEW; END IF;
      SELECT name INTO project FROM projects WHERE project_id = NEW.project_id;
      PERFORM yoke_refuse_with('permission_denied',
        format('%s may not deploy project %s: creating a run needs its runs.deploy grant or its steering seat', session_user, project),
        format('ask an admin for the grant (yoke projects grant %s --actor %s --permission runs.deploy), or take the seat: yoke claims steering take --project %s',
          project, session_user, project),
        jsonb_build_object('project', project, 'actor_id', session_user, 'permission', 'runs.deploy'));
      RETURN NEW;
    END $fn$;

    -- Each rule fires for users only (admins and the worker act for everyone).
    CREATE TRIGGER work_claims_history_kept BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${user} AND OLD.released_at IS NOT NULL) EXECUTE FUNCTION work_claims_history_kept();
    CREATE TRIGGER work_claims_take_rules BEFORE INSERT ON work_claims FOR EACH ROW
      WHEN (${user}) EXECUTE FUNCTION work_claims_take_rules();
    CREATE TRIGGER sessions_end_kept BEFORE UPDATE ON sessions FOR EACH ROW
      WHEN (${user} AND (OLD.ended_at IS NOT NULL OR OLD.terminated_at IS NOT NULL)) EXECUTE FUNCTION sessions_end_kept();
    CREATE TRIGGER qa_executions_kept BEFORE UPDATE ON qa_plan_executions FOR EACH ROW
      WHEN (${user}) EXECUTE FUNCTION qa_executions_kept();
    CREATE TRIGGER qa_executions_begin_running BEFORE INSERT ON qa_plan_executions FOR EACH ROW
      WHEN (${user}) EXECUTE FUNCTION qa_executions_begin_running();
    CREATE TRIGGER deployment_runs_create_authority BEFORE INSERT ON deployment_runs FOR EACH ROW
      WHEN (${user}) EXECUTE FUNCTION deployment_runs_create_authority();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER qa_executions_begin_running ON qa_plan_executions;
    DROP TRIGGER qa_executions_kept ON qa_plan_executions;
    DROP FUNCTION qa_executions_begin_running(), qa_executions_kept();
    DROP TRIGGER deployment_runs_create_authority ON deployment_runs;
    DROP TRIGGER sessions_end_kept ON sessions;
    DROP TRIGGER work_claims_take_rules ON work_claims;
    DROP TRIGGER work_claims_history_kept ON work_claims;
    DROP FUNCTION deployment_runs_create_authority(), sessions_end_kept(), work_claims_take_rules(), work_claims_history_kept();
  `.execute(db);
}
