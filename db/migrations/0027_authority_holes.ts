import { Kysely, sql } from 'kysely';

/**
 * Issue 13, holes an audit found by raw SQL as real login roles; each rule now lives in
 * Postgres, so a client that skips the CLI is held to it:
 *
 * - backlog_items (D7, D8, S2, S6): a user names an item (a bare row, as a claim's ensureItem
 *   does) and moves it along, nothing more. What the project definition declares (project,
 *   number, title, completion flow, tracker issue) is an admin's; done is never undone;
 *   delivery-ready needs the item's dependencies; completed deliveries are appended, only by a
 *   delivered run the item is a member of and as that run names them; and a user's move to
 *   done passes the done gate here, through the run its new attribution names, with the
 *   same reasons doneGateReasons gives (the CLI checks first and names them the same way).
 * - test_machine_checks (W2, W8): a check's verdict decides a machine's health, and only the
 *   worker runs checks, so only the worker (and admins) record them; users record none.
 * - work_claims (C11): an operator release (a user releasing another actor's claim) writes its
 *   WARNOperatorLeaseRelease event inside the releasing statement, before the row lands, so no
 *   release by raw SQL skips it.
 * - events: a user writes only the event types its commands write; WARNOperatorLeaseRelease
 *   only as an operator of its project (seat and claims.release), as the claim trigger does.
 */

/** The event types users' commands write (every recordEvent call a CLI path reaches, and yoke_execute). */
const USER_EVENT_TYPES = [
  'DeploymentRunCreated',
  'DeploymentRunExecuting',
  'DeploymentRunRetried',
  'DeploymentRunItemAdded',
  'DeploymentRunItemRemoved',
  'DeploymentRunFailed',
  'DeploymentRunCancelled',
  'DeploymentRunStageStarted',
  'DeploymentRunTakenOver',
  'DeploymentRunQaAdded',
  'DeploymentRunSettling',
  'DeploymentRunSucceeded',
  'ItemDone',
  'QaPlanExecutionBegun',
];

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- An item's reference (PREFIX-N), whatever the caller may read.
    CREATE FUNCTION yoke_item_ref(item integer) RETURNS text STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT p.item_prefix || '-' || i.number FROM backlog_items i JOIN projects p ON p.project_id = i.project_id
       WHERE i.item_id = item
    $fn$;

    -- The done gate (S2, S6) of an item through the run closing it, as doneGateReasons: the
    -- reasons it fails, each led by its code (empty: it holds). evidence is the item's
    -- delivery_evidence before the done write (its stamps, D7 prerequisites).
    CREATE FUNCTION yoke_done_gate_reasons(item integer, closing text, evidence jsonb) RETURNS text[] STABLE
      LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    DECLARE ref text := yoke_item_ref(item); r deployment_runs; read_entry jsonb; reasons text[] := '{}';
    BEGIN
      SELECT * INTO r FROM deployment_runs WHERE run_id = closing;
      SELECT e INTO read_entry FROM deployment_item_completion_runs w CROSS JOIN LATERAL jsonb_array_elements(w.completion_runs) e
       WHERE w.item_id = item AND e->>'run_id' = w.read_run_id LIMIT 1;
      IF r.run_id IS NULL OR read_entry IS NULL OR read_entry->>'run_id' IS DISTINCT FROM closing
         OR NOT (read_entry->>'status' = 'succeeded' OR (read_entry->>'status' = 'executing' AND (read_entry->>'settling')::boolean)) THEN
        reasons := reasons || format('delivery_not_discharged: %s''s completion authority reads %s, not a delivered %s', ref,
          coalesce('run ' || (read_entry->>'run_id'), 'no run'), coalesce(closing, '(no run)'));
      END IF;
      reasons := reasons || ARRAY(
        SELECT format('done_gate_qa_open: blocking QA requirement %s is %s', q.check_name, q.status)
          FROM deployment_run_qa q
         WHERE q.run_id = closing AND q.source = 'item-rollup' AND q.blocking AND q.retracted_at IS NULL
           AND split_part(q.check_name, '/', 1) = ref AND q.status NOT IN ('passed', 'waived')
         ORDER BY q.check_name);
      reasons := reasons || ARRAY(
        SELECT 'post_deploy_obligations_unanswered: ' || string_agg(ref || '/' || c.case_key, ', ' ORDER BY c.case_key)
          FROM item_qa_cases c
         WHERE c.item_id = item AND c.qa_phase = 'post_deploy' AND c.blocking AND NOT c.waived AND NOT c.superseded
           AND c.plan_id IS NULL
           AND NOT EXISTS (SELECT 1 FROM deployment_run_qa own
                            WHERE own.run_id = closing AND own.retracted_at IS NULL AND own.check_name = ref || '/' || c.case_key)
           AND NOT EXISTS (SELECT 1 FROM deployment_run_qa q JOIN deployment_run_items m ON m.run_id = q.run_id AND m.item_id = c.item_id
                            WHERE q.check_name = ref || '/' || c.case_key AND q.status IN ('passed', 'waived') AND q.retracted_at IS NULL
                              AND (q.run_id = closing OR m.delivered_source_sha = r.candidate_sha))
        HAVING count(*) > 0);
      IF cardinality(reasons) = 0
         AND NOT (evidence->'rung'->>'run' IS NOT DISTINCT FROM closing AND evidence->'preflight'->>'run' IS NOT DISTINCT FROM closing) THEN
        reasons := reasons || format('not_prepared: %s''s delivery_evidence rung and status preflight for %s are not committed', ref, closing);
      END IF;
      RETURN reasons;
    END $fn$;

    CREATE FUNCTION backlog_items_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE ref text := yoke_item_ref(OLD.item_id);
            old_cd jsonb := coalesce(OLD.delivery_evidence->'completed_deliveries', '[]'::jsonb);
            new_cd jsonb := coalesce(NEW.delivery_evidence->'completed_deliveries', '[]'::jsonb);
            d jsonb; r record; reasons text[]; stamp text;
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF (NEW.item_id, NEW.project_id, NEW.number, NEW.title, NEW.created_at, NEW.defined_in_project, NEW.completion_flow_id, NEW.tracker_issue)
         IS DISTINCT FROM (OLD.item_id, OLD.project_id, OLD.number, OLD.title, OLD.created_at, OLD.defined_in_project, OLD.completion_flow_id, OLD.tracker_issue) THEN
        PERFORM yoke_refuse('permission_denied',
          format('%s cannot change %s''s project, number, title, completion flow or tracker issue: its project definition declares them', session_user, ref),
          'an admin changes the project definition: yoke apply FILE');
      END IF;
      IF OLD.status = 'done' AND NEW.status <> 'done' THEN
        PERFORM yoke_refuse('item_done', format('%s is done; a completed delivery is never revoked', ref), 'open a new item for further work');
      END IF;
      IF NEW.status = 'delivery_ready' AND OLD.status <> 'delivery_ready' AND EXISTS (
           SELECT 1 FROM item_dependencies dd JOIN backlog_items di ON di.item_id = dd.depends_on_item_id
            WHERE dd.item_id = OLD.item_id
              AND NOT (di.status = 'done' AND (dd.environment = '' OR coalesce(di.delivery_evidence->'completed_deliveries', '[]'::jsonb)
                                                 @> jsonb_build_array(jsonb_build_object('environment', dd.environment))))) THEN
        PERFORM yoke_refuse('dependency_unsatisfied', format('%s has dependencies not yet delivered (D7)', ref),
          format('deliver them first: yoke items get %s', ref));
      END IF;
      -- When the status moved, now; else as it was (no back-dated moves).
      NEW.status_changed_at := CASE WHEN NEW.status IS DISTINCT FROM OLD.status THEN clock_timestamp() ELSE OLD.status_changed_at END;

      -- delivery_evidence: the prerequisites' stamps and appended completed deliveries, nothing else.
      IF (NEW.delivery_evidence - 'rung' - 'preflight' - 'completed_deliveries')
         IS DISTINCT FROM (OLD.delivery_evidence - 'rung' - 'preflight' - 'completed_deliveries') THEN
        PERFORM yoke_refuse('permission_denied', format('%s cannot rewrite %s''s delivery evidence', session_user, ref),
          'delivery evidence is written by the done gate and settlement: yoke items update ITEM status done');
      END IF;
      FOREACH stamp IN ARRAY ARRAY['rung', 'preflight'] LOOP
        IF NEW.delivery_evidence->stamp IS DISTINCT FROM OLD.delivery_evidence->stamp AND NOT EXISTS (
             SELECT 1 FROM deployment_run_items m WHERE m.item_id = OLD.item_id AND m.run_id = NEW.delivery_evidence->stamp->>'run') THEN
          PERFORM yoke_refuse('permission_denied',
            format('%s''s %s stamp must name a run it is a member of, not %s', ref, stamp, coalesce(NEW.delivery_evidence->stamp->>'run', '(none)')),
            'stamps are written by the done gate and settlement: yoke deployment-runs update RUN status succeeded');
        END IF;
      END LOOP;
      IF jsonb_typeof(new_cd) <> 'array' OR jsonb_array_length(new_cd) < jsonb_array_length(old_cd)
         OR (SELECT coalesce(jsonb_agg(a.e ORDER BY a.n), '[]'::jsonb) FROM jsonb_array_elements(new_cd) WITH ORDINALITY a(e, n)
              WHERE a.n <= jsonb_array_length(old_cd)) IS DISTINCT FROM old_cd THEN
        PERFORM yoke_refuse('permission_denied', format('%s''s completed deliveries are appended, never changed or revoked (D7)', ref),
          'a delivery is attributed by the run that delivered it');
      END IF;
      -- The done gate first (its refusal names the spec's code), then each new attribution.
      IF NEW.status = 'done' AND OLD.status <> 'done' THEN
        reasons := CASE WHEN jsonb_array_length(new_cd) = jsonb_array_length(old_cd)
                        THEN ARRAY[format('delivery_not_discharged: the done write of %s names no completion run that delivered it', ref)]
                        ELSE yoke_done_gate_reasons(OLD.item_id, new_cd->-1->>'run', OLD.delivery_evidence) END;
        IF cardinality(reasons) > 0 THEN
          PERFORM yoke_refuse('done_gate_refused', format('%s cannot be done: %s', ref, array_to_string(reasons, '; ')),
            format('deliver it through its completion flow and settle the run: yoke deployment-runs start-for-item %s --candidate SHA', ref));
        END IF;
      END IF;
      FOR d IN SELECT a.e FROM jsonb_array_elements(new_cd) WITH ORDINALITY a(e, n) WHERE a.n > jsonb_array_length(old_cd) LOOP
        SELECT run.run_id, run.candidate_sha, run.status, run.settling_at, p.name AS owner, env.name AS environment INTO r
          FROM deployment_runs run
          JOIN projects p ON p.project_id = run.project_id
          JOIN environments env ON env.environment_id = run.target_environment_id
          JOIN deployment_run_items m ON m.run_id = run.run_id AND m.item_id = OLD.item_id
         WHERE run.run_id = d->>'run';
        IF NOT FOUND OR NOT (r.status = 'succeeded' OR (r.status = 'executing' AND r.settling_at IS NOT NULL))
           OR (d->>'candidate', d->>'owner', d->>'environment', d->>'member')
              IS DISTINCT FROM (r.candidate_sha, r.owner, r.environment, ref) THEN
          PERFORM yoke_refuse('permission_denied',
            format('%s cannot gain a completed delivery through run %s: only a delivered run it is a member of attributes it, as that run names it (D7)',
              ref, coalesce(d->>'run', '(none)')),
            'deliver it: yoke deployment-runs start-for-item ITEM --candidate SHA, then let the run settle');
        END IF;
      END LOOP;

      RETURN NEW;
    END $fn$;
    CREATE TRIGGER backlog_items_authority BEFORE UPDATE ON backlog_items FOR EACH ROW EXECUTE FUNCTION backlog_items_authority();

    -- A user names an item: a bare row (ensureItem); everything else follows the rules above.
    DROP POLICY yoke_user_insert ON backlog_items;
    CREATE POLICY yoke_user_insert ON backlog_items FOR INSERT TO yoke_user WITH CHECK (
      status = 'open' AND status_changed_at IS NULL AND delivery_evidence = '{}'::jsonb AND NOT defined_in_project
      AND title IS NULL AND completion_flow_id IS NULL AND tracker_issue IS NULL AND lane_path IS NULL);

    -- W2 W8: only the worker runs checks, so only it (and admins) records them.
    DROP POLICY yoke_user_insert ON test_machine_checks;

    -- Events: the types users' commands write; an operator release's only by an operator of its
    -- project (the claim trigger, or the CLI where the trigger writes none: your own claim).
    DROP POLICY yoke_user_insert ON events;
    CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK (
      actor_id = session_user
      AND (event_type IN (${sql.raw(USER_EVENT_TYPES.map((t) => `'${t}'`).join(', '))})
           OR (event_type = 'WARNOperatorLeaseRelease' AND yoke_holds_seat(project_id) AND yoke_has_grant(project_id, 'claims.release'))));

    -- C11: an operator release (a user releasing another actor's live claim, which
    -- work_claims_authority, firing first, has allowed only with the seat and the grant) writes
    -- its event as the CLI wrote it, in the releasing statement, before the release lands. An
    -- expired turn passing on (W9) and a done item's claims ending with the done write are no
    -- operator's release.
    CREATE FUNCTION work_claims_operator_event() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE project integer;
    BEGIN
      IF yoke_is_service() OR OLD.released_at IS NOT NULL OR NEW.released_at IS NULL
         OR yoke_session_actor(OLD.session_id) = session_user
         OR (OLD.reserved_until IS NOT NULL AND OLD.reserved_until <= clock_timestamp())
         OR (OLD.target_kind IN ('item', 'migration_serialization')
             AND EXISTS (SELECT 1 FROM backlog_items i WHERE i.item_id = OLD.item_id AND i.status = 'done')) THEN
        RETURN NEW;
      END IF;
      project := coalesce(OLD.project_id, (SELECT s.project_id FROM sessions s WHERE s.session_id = OLD.session_id));
      INSERT INTO events (event_type, project_id, session_id, claim_id, payload)
      VALUES ('WARNOperatorLeaseRelease', project, NEW.released_by_session_id, OLD.claim_id,
              jsonb_build_object('key', OLD.key, 'target_kind', OLD.target_kind,
                                 'sticky', OLD.target_kind IN ('migration_serialization', 'qa_admission'),
                                 'holder_session_id', OLD.session_id, 'operator_session_id', NEW.released_by_session_id,
                                 'operator_actor_id', session_user, 'reason', NEW.release_reason));
      NEW.released_at := clock_timestamp();
      RETURN NEW;
    END $fn$;
    -- Triggers fire in name order: after work_claims_authority.
    CREATE TRIGGER work_claims_operator_event BEFORE UPDATE ON work_claims FOR EACH ROW EXECUTE FUNCTION work_claims_operator_event();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER backlog_items_authority ON backlog_items;
    DROP TRIGGER work_claims_operator_event ON work_claims;
    DROP FUNCTION work_claims_operator_event();
    DROP FUNCTION backlog_items_authority(), yoke_done_gate_reasons(integer, text, jsonb), yoke_item_ref(integer);
    DROP POLICY yoke_user_insert ON backlog_items;
    CREATE POLICY yoke_user_insert ON backlog_items FOR INSERT TO yoke_user WITH CHECK (true);
    CREATE POLICY yoke_user_insert ON test_machine_checks FOR INSERT TO yoke_user
      WITH CHECK (session_id IS NULL OR yoke_session_actor(session_id) = session_user);
    DROP POLICY yoke_user_insert ON events;
    CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK (actor_id = session_user);
  `.execute(db);
}
