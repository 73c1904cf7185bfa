import { Kysely, sql } from 'kysely';

/**
 * Issue 13: row-level security on every table, so a client that skips the CLI is held to the
 * specification's authority rules. Every table: everyone reads (the board, runs and the
 * waiting line are shared views); admins and the worker (`yoke_is_service()`) write. A user's
 * writes are narrowed per table by policies, and where a refusal has a name in the spec
 * (`steering_seat_required`, `run_driven_elsewhere`) a BEFORE trigger raises it with that code
 * first; the policy stays as the backstop. The rules read rows through SECURITY DEFINER
 * functions, so they see what they need whatever the caller may read.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- The actor a session belongs to (NULL for no such session).
    CREATE FUNCTION yoke_session_actor(sid text) RETURNS text STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT actor_id FROM sessions WHERE session_id = sid
    $fn$;

    -- The caller holds the project's live steering seat through one of its live sessions.
    CREATE FUNCTION yoke_holds_seat(project integer) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM work_claims c JOIN sessions s ON s.session_id = c.session_id
                      WHERE c.target_kind = 'steering' AND c.project_id = project AND c.released_at IS NULL
                        AND s.actor_id = session_user AND s.ended_at IS NULL AND s.terminated_at IS NULL)
    $fn$;

    CREATE FUNCTION yoke_has_grant(project integer, perm text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM project_grants g WHERE g.project_id = project AND g.actor_id = session_user AND g.permission = perm)
    $fn$;

    -- Who may start and drive runs of a project: an admin, a holder of its runs.deploy grant, or
    -- its steering seat.
    CREATE FUNCTION yoke_may_deploy(project integer) RETURNS boolean STABLE LANGUAGE sql
      SET search_path = public, pg_temp AS $fn$
      SELECT yoke_is_admin() OR yoke_has_grant(project, 'runs.deploy') OR yoke_holds_seat(project)
    $fn$;

    -- R1 in the database: a live driver attachment (heartbeat within the spec's ten minutes, its
    -- session not ended) owns the run; its actor or a steering seat holder may act; anyone
    -- else is refused run_driven_elsewhere. Without a live driver, approvals and waivers
    -- (strict) need the seat; execution needs the right to deploy. NULL: allowed.
    CREATE FUNCTION yoke_run_refusal(run text, seat_rule boolean) RETURNS text STABLE LANGUAGE plpgsql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    DECLARE r deployment_runs; live boolean;
    BEGIN
      IF yoke_is_service() THEN RETURN NULL; END IF;
      SELECT * INTO r FROM deployment_runs WHERE run_id = run;
      IF NOT FOUND THEN RETURN NULL; END IF;
      live := r.driver_session_id IS NOT NULL AND r.driver_heartbeat_at > now() - interval '10 minutes'
        AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = r.driver_session_id AND s.ended_at IS NULL AND s.terminated_at IS NULL);
      IF (live AND yoke_session_actor(r.driver_session_id) = session_user) OR yoke_holds_seat(r.project_id) THEN RETURN NULL; END IF;
      IF live THEN RETURN 'run_driven_elsewhere'; END IF;
      IF seat_rule THEN RETURN 'steering_seat_required'; END IF;
      IF yoke_may_deploy(r.project_id) THEN RETURN NULL; END IF;
      RETURN 'permission_denied';
    END $fn$;

    CREATE FUNCTION yoke_require_run_authority(run text, seat_rule boolean, doing text) RETURNS void LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    DECLARE code text := yoke_run_refusal(run, seat_rule);
    BEGIN
      IF code IS NULL THEN RETURN; END IF;
      PERFORM yoke_refuse(code, format('%s cannot %s on run %s: %s', session_user, doing, run,
        CASE code WHEN 'run_driven_elsewhere' THEN 'another actor''s live driver attachment owns it'
                  WHEN 'steering_seat_required' THEN 'it has no live driver and you hold no steering seat on its project'
                  ELSE 'you may not deploy its project' END),
        CASE code WHEN 'run_driven_elsewhere' THEN 'ask its driver, or take the project''s steering seat: yoke claims steering take --project P'
                  WHEN 'steering_seat_required' THEN 'take the steering seat: yoke claims steering take --project P'
                  ELSE 'ask an admin for the runs.deploy grant: yoke projects grant P --actor A --permission runs.deploy' END);
    END $fn$;

    -- Every table: everyone reads, admins and the worker write; RLS binds the owner too.
    DO $$
    DECLARE t text;
    BEGIN
      FOR t IN SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY yoke_read ON %I FOR SELECT USING (true)', t);
        EXECUTE format('CREATE POLICY yoke_service ON %I USING ((SELECT yoke_is_service())) WITH CHECK ((SELECT yoke_is_service()))', t);
      END LOOP;
    END $$;

    -- A table a later migration creates is covered the moment it exists (read by all, written
    -- by admins and the worker) until its migration adds the user policies it needs.
    CREATE FUNCTION yoke_secure_new_tables() RETURNS event_trigger LANGUAGE plpgsql AS $fn$
    DECLARE o record;
    BEGIN
      FOR o IN SELECT * FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE TABLE' AND schema_name = 'public' LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', o.objid::regclass);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', o.objid::regclass);
        EXECUTE format('CREATE POLICY yoke_read ON %s FOR SELECT USING (true)', o.objid::regclass);
        EXECUTE format('CREATE POLICY yoke_service ON %s USING ((SELECT yoke_is_service())) WITH CHECK ((SELECT yoke_is_service()))', o.objid::regclass);
      END LOOP;
    END $fn$;
    CREATE EVENT TRIGGER yoke_secure_new_tables ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
      EXECUTE FUNCTION yoke_secure_new_tables();

    -- Sessions: a user registers, heartbeats and ends only its own.
    CREATE POLICY yoke_user_insert ON sessions FOR INSERT TO yoke_user WITH CHECK (actor_id = session_user);
    CREATE POLICY yoke_user_update ON sessions FOR UPDATE TO yoke_user USING (true) WITH CHECK (actor_id = session_user);
    CREATE FUNCTION sessions_own_only() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF OLD.actor_id <> session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('session %s belongs to actor %s; %s cannot heartbeat, change or end it', OLD.session_id, OLD.actor_id, session_user),
          'act on your own sessions (yoke sessions list), or ask an admin');
      END IF;
      IF NEW.session_id <> OLD.session_id OR NEW.actor_id <> OLD.actor_id OR NEW.registered_by <> OLD.registered_by THEN
        PERFORM yoke_refuse('permission_denied', format('session %s keeps its id, actor and registrar', OLD.session_id),
          'register a new session instead');
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER sessions_own_only BEFORE UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION sessions_own_only();

    -- Claims (C1, C8, C9, C11, W7): taken with your own session, or a waiting-line turn reserved
    -- for the oldest waiter by whoever released the machine; released by their actor, by an
    -- operator holding the holder project's steering seat and its claims.release grant, or by
    -- anyone once a reserved turn has expired.
    CREATE FUNCTION yoke_waits_for(sid text, machine text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM qa_test_machine_waits w WHERE w.session_id = sid AND w.test_machine = machine AND w.state = 'waiting')
    $fn$;
    CREATE POLICY yoke_user_insert ON work_claims FOR INSERT TO yoke_user WITH CHECK (
      yoke_session_actor(session_id) = session_user
      OR (target_kind = 'qa_admission' AND reserved_until IS NOT NULL AND yoke_waits_for(session_id, scope->>'test_machine')));
    CREATE POLICY yoke_user_update ON work_claims FOR UPDATE TO yoke_user USING (true) WITH CHECK (
      yoke_session_actor(session_id) = session_user OR (released_at IS NOT NULL AND released_by_actor_id = session_user));
    CREATE FUNCTION work_claims_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE project integer;
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF TG_OP = 'INSERT' THEN
        IF yoke_session_actor(NEW.session_id) IS DISTINCT FROM session_user
           AND NOT (NEW.target_kind = 'qa_admission' AND NEW.reserved_until IS NOT NULL AND yoke_waits_for(NEW.session_id, NEW.scope->>'test_machine')) THEN
          PERFORM yoke_refuse('permission_denied',
            format('%s cannot take a claim for session %s of actor %s: claims are taken with your own session',
              session_user, NEW.session_id, coalesce(yoke_session_actor(NEW.session_id), '(none)')),
            'register your own session (yoke sessions register --session S) and pass it');
        END IF;
        RETURN NEW;
      END IF;
      IF (NEW.claim_id, NEW.target_kind, NEW.scope, NEW.key, NEW.project_id, NEW.item_id, NEW.session_id, NEW.claimed_at)
         IS DISTINCT FROM (OLD.claim_id, OLD.target_kind, OLD.scope, OLD.key, OLD.project_id, OLD.item_id, OLD.session_id, OLD.claimed_at) THEN
        PERFORM yoke_refuse('permission_denied', format('claim %s keeps its target and holder', OLD.claim_id),
          'release it and take a new claim');
      END IF;
      IF NEW.released_by_session_id IS DISTINCT FROM OLD.released_by_session_id AND NEW.released_by_session_id IS NOT NULL
         AND yoke_session_actor(NEW.released_by_session_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied', format('%s cannot release claim %s in the name of session %s', session_user, OLD.claim_id, NEW.released_by_session_id),
          'release with your own session');
      END IF;
      IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL THEN NEW.released_by_actor_id := session_user; END IF;
      IF yoke_session_actor(OLD.session_id) = session_user THEN RETURN NEW; END IF;
      IF OLD.released_at IS NOT NULL OR NEW.released_at IS NULL THEN
        PERFORM yoke_refuse('permission_denied',
          format('claim %s is held by session %s of another actor; %s may only release it as an operator', OLD.claim_id, OLD.session_id, session_user),
          'ask its holder, or release it as an operator (yoke coordination-claim release)');
      END IF;
      IF OLD.reserved_until IS NOT NULL AND OLD.reserved_until <= clock_timestamp() THEN RETURN NEW; END IF;  -- W9: an expired turn passes on
      project := coalesce(OLD.project_id, (SELECT s.project_id FROM sessions s WHERE s.session_id = OLD.session_id));
      IF project IS NULL OR NOT yoke_holds_seat(project) THEN
        PERFORM yoke_refuse('steering_seat_required',
          format('%s holds no live steering seat on the holder''s project, so it cannot release claim %s', session_user, OLD.claim_id),
          'take the seat first: yoke claims steering take --project P --session S');
      END IF;
      IF NOT yoke_has_grant(project, 'claims.release') THEN
        PERFORM yoke_refuse('permission_denied', format('actor %s lacks claims.release on the holder''s project', session_user),
          'an admin grants it: yoke projects grant P --actor A --permission claims.release');
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER work_claims_authority BEFORE INSERT OR UPDATE ON work_claims FOR EACH ROW EXECUTE FUNCTION work_claims_authority();

    -- The waiting line: join with your own session; the hand-off (reserve, grant, expire,
    -- cancel) runs inside whoever's transaction releases the machine, so any user may move a
    -- wait along.
    CREATE POLICY yoke_user_insert ON qa_test_machine_waits FOR INSERT TO yoke_user
      WITH CHECK (yoke_session_actor(session_id) = session_user AND actor_id = session_user);
    CREATE POLICY yoke_user_update ON qa_test_machine_waits FOR UPDATE TO yoke_user USING (true) WITH CHECK (true);

    -- Events: insert-only, written as yourself (the BEFORE trigger of 0016_actors sets actor_id).
    CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK (actor_id = session_user);

    -- Items: users create them by naming them and move their status (the done gate is in the CLI).
    CREATE POLICY yoke_user_insert ON backlog_items FOR INSERT TO yoke_user WITH CHECK (true);
    CREATE POLICY yoke_user_update ON backlog_items FOR UPDATE TO yoke_user USING (true) WITH CHECK (true);

    -- Checks of a test machine a user verifies, recorded under its own session (or none).
    CREATE POLICY yoke_user_insert ON test_machine_checks FOR INSERT TO yoke_user
      WITH CHECK (session_id IS NULL OR yoke_session_actor(session_id) = session_user);

    -- Usage folds and backfills of your own sessions.
    CREATE POLICY yoke_user_insert ON session_usage FOR INSERT TO yoke_user WITH CHECK (yoke_session_actor(session_id) = session_user);
    CREATE POLICY yoke_user_update ON session_usage FOR UPDATE TO yoke_user USING (yoke_session_actor(session_id) = session_user)
      WITH CHECK (yoke_session_actor(session_id) = session_user);

    -- Runs (I1, R1): created for projects you may deploy with your own session; every change
    -- by their driver, a steering seat holder, or (no live driver) someone who may deploy.
    CREATE POLICY yoke_user_insert ON deployment_runs FOR INSERT TO yoke_user WITH CHECK (
      yoke_may_deploy(project_id) AND (created_by_session_id IS NULL OR yoke_session_actor(created_by_session_id) = session_user));
    CREATE POLICY yoke_user_update ON deployment_runs FOR UPDATE TO yoke_user USING (true) WITH CHECK (
      yoke_may_deploy(project_id) OR yoke_session_actor(driver_session_id) = session_user);
    CREATE FUNCTION deployment_runs_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      PERFORM yoke_require_run_authority(OLD.run_id, false, 'change');
      IF NEW.driver_session_id IS DISTINCT FROM OLD.driver_session_id AND NEW.driver_session_id IS NOT NULL
         AND yoke_session_actor(NEW.driver_session_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('%s cannot attach session %s of another actor as the driver of run %s', session_user, NEW.driver_session_id, OLD.run_id),
          'drive with your own session');
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER deployment_runs_authority BEFORE UPDATE ON deployment_runs FOR EACH ROW EXECUTE FUNCTION deployment_runs_authority();

    -- A run's parts follow the run's rule; a waiver, an operator QA check and an approval are
    -- strict (the driver or a seat, as the CLI's requireRunAuthority); a passed or failed
    -- verdict is a QA runner's to record.
    CREATE FUNCTION run_parts_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE row_new jsonb := CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE to_jsonb(NEW) END;
            row_old jsonb := CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE to_jsonb(OLD) END;
            run text := coalesce(row_new->>'run_id', row_old->>'run_id');
            seat_rule boolean := false; doing text := 'change ' || TG_TABLE_NAME;
    BEGIN
      IF yoke_is_service() THEN RETURN coalesce(NEW, OLD); END IF;
      IF TG_TABLE_NAME = 'deployment_run_qa' THEN
        IF row_new->>'status' = 'waived' AND (row_old IS NULL OR row_old->>'status' <> 'waived') THEN
          seat_rule := true; doing := 'waive QA check ' || (row_new->>'check_name');
        ELSIF TG_OP = 'INSERT' AND row_new->>'source' = 'operator' THEN
          seat_rule := true; doing := 'add QA check ' || (row_new->>'check_name');
        ELSIF TG_OP = 'UPDATE' AND row_new->>'status' IN ('passed', 'failed')
              AND (row_new - 'status' - 'updated_at') = (row_old - 'status' - 'updated_at') THEN
          RETURN NEW;
        END IF;
      ELSIF TG_TABLE_NAME = 'deployment_run_stages' AND row_new->>'kind' = 'approval' AND row_new->>'status' = 'passed'
            AND row_old->>'status' IS DISTINCT FROM 'passed' THEN
        seat_rule := true; doing := 'approve stage ' || (row_new->>'name');
      END IF;
      PERFORM yoke_require_run_authority(run, seat_rule, doing);
      RETURN coalesce(NEW, OLD);
    END $fn$;

    DO $$
    DECLARE t text;
    BEGIN
      FOREACH t IN ARRAY ARRAY['deployment_run_items', 'deployment_run_item_removals', 'deployment_run_qa',
                               'deployment_run_stages', 'deployment_run_occupancy'] LOOP
        EXECUTE format('CREATE POLICY yoke_user_write ON %I FOR ALL TO yoke_user USING (true) WITH CHECK (yoke_run_refusal(run_id, false) IS NULL OR %L = ''deployment_run_qa'')', t, t);
        EXECUTE format('CREATE TRIGGER %I BEFORE INSERT OR UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION run_parts_authority()', t || '_authority', t);
      END LOOP;
    END $$;

    -- QA plan executions: begun with your own session on a run; changed by whoever began them
    -- or holds the run's authority; a waived case needs the strict rule.
    CREATE FUNCTION yoke_execution_actor(execution integer) RETURNS text STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT s.actor_id FROM qa_plan_executions e JOIN sessions s ON s.session_id = e.session_id WHERE e.execution_id = execution
    $fn$;
    CREATE FUNCTION yoke_execution_run(execution integer) RETURNS text STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT run_id FROM qa_plan_executions WHERE execution_id = execution
    $fn$;
    CREATE POLICY yoke_user_insert ON qa_plan_executions FOR INSERT TO yoke_user
      WITH CHECK (yoke_session_actor(session_id) = session_user);
    CREATE POLICY yoke_user_update ON qa_plan_executions FOR UPDATE TO yoke_user USING (true)
      WITH CHECK (yoke_session_actor(session_id) = session_user OR yoke_run_refusal(run_id, true) IS NULL);
    CREATE POLICY yoke_user_insert ON qa_plan_execution_results FOR INSERT TO yoke_user WITH CHECK (
      yoke_session_actor(recorded_by_session_id) = session_user
      AND (verdict <> 'waived' OR yoke_run_refusal(yoke_execution_run(execution_id), true) IS NULL));
    CREATE POLICY yoke_user_write ON qa_plan_execution_leases FOR ALL TO yoke_user USING (yoke_execution_actor(execution_id) = session_user)
      WITH CHECK (yoke_execution_actor(execution_id) = session_user);
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DO $$
    DECLARE t text; p record;
    BEGIN
      FOR p IN SELECT tablename, policyname FROM pg_policies WHERE schemaname = 'public' AND policyname LIKE 'yoke\\_%' LOOP
        EXECUTE format('DROP POLICY %I ON %I', p.policyname, p.tablename);
      END LOOP;
      FOR t IN SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' LOOP
        EXECUTE format('ALTER TABLE %I NO FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY', t);
      END LOOP;
    END $$;
    DROP EVENT TRIGGER yoke_secure_new_tables;
    DROP TRIGGER sessions_own_only ON sessions;
    DROP TRIGGER work_claims_authority ON work_claims;
    DROP TRIGGER deployment_runs_authority ON deployment_runs;
    DROP TRIGGER deployment_run_items_authority ON deployment_run_items;
    DROP TRIGGER deployment_run_item_removals_authority ON deployment_run_item_removals;
    DROP TRIGGER deployment_run_qa_authority ON deployment_run_qa;
    DROP TRIGGER deployment_run_stages_authority ON deployment_run_stages;
    DROP TRIGGER deployment_run_occupancy_authority ON deployment_run_occupancy;
  `.execute(db);
}
