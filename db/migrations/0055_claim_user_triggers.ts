import { Kysely, sql } from 'kysely';

/**
 * Issue 16, claims: work_claims had six user-only triggers (0043_claimperf_lean_claims), and
 * Postgres plans and runs each trigger's WHEN on every row it writes: an acquire evaluated the role
 * test twice, a release four times and `yoke_delivered_release` (a SECURITY DEFINER SQL function,
 * run through the executor on every call) three times, before any rule ran. The same rules now
 * run from three triggers, in the order the six fired in (Postgres fires a table's triggers by
 * name):
 * - BEFORE INSERT, work_claims_user_insert: the authority check (a claim is taken with the taker's
 *   own session, or it is a waiter's reserved turn, W7), then the take rules (session live, taken
 *   live, no retired deploy lock, W4 W7 W8 for a test machine);
 * - BEFORE UPDATE, work_claims_delivered_release (kept): a delivered release (S1: the settling run
 *   closes its items' claims) records its actor and nothing else;
 * - BEFORE UPDATE, work_claims_user_update: any other change passes the authority check (who may
 *   release, C1 C5), then keeps released history unchanged, then records an operator's release of
 *   another's claim (C5, WARNOperatorLeaseRelease).
 * Each old trigger's early `RETURN NEW` (a pass that skipped the rest of that trigger only) is an
 * EXIT from its own labelled block, so the rules after it still run. The delivered test runs in the
 * two UPDATE WHENs and only for the kinds it can hold. For the service (whose WHEN is false) a pair
 * now evaluates the role test three times where it did six: in bench:claims-cpu, two alternated
 * runs each, the backend's CPU per test-machine pair went from 0.546-0.602 to 0.525-0.567 ms. A
 * user's release no longer runs `yoke_delivered_release` for a test machine at all.
 *
 * The other old trigger functions stay, unused, for down.
 */
/**
 * S1: a delivered release, tested in a trigger's WHEN as before: a WHEN reads the statement's
 * snapshot, where a test in the (volatile) trigger body would see the rows this same UPDATE has
 * already changed (a seat it released) and what committed while it waited for the row. The kind
 * is tested inline first, so a test machine's release never calls the function.
 */
/** A release of a delivered item's claim (the delivered-release trigger's WHEN; 0060 reads it too). */
export const delivered = sql.raw(`(OLD.released_at IS NULL AND NEW.released_at IS NOT NULL
        AND OLD.target_kind IN ('item', 'migration_serialization', 'epic_task', 'path_claim')
        AND yoke_delivered_release(OLD, NEW))`);

/** work_claims_user_update's body (0061 adds 0060's two rules to it). */
export const userUpdateBody = `    DECLARE project integer;
    BEGIN
      -- C1 C5: a claim keeps its target and holder; its holder's actor releases it, or an operator.
      <<authority>>
      BEGIN
        EXIT authority WHEN yoke_is_service();
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
        EXIT authority WHEN yoke_session_actor(OLD.session_id) = session_user;
        IF OLD.released_at IS NOT NULL OR NEW.released_at IS NULL THEN
          PERFORM yoke_refuse('permission_denied',
            format('claim %s is held by session %s of another actor; %s may only release it as an operator', OLD.claim_id, OLD.session_id, session_user),
            'ask its holder, or release it as an operator (yoke coordination-claim release)');
        END IF;
        EXIT authority WHEN OLD.reserved_until IS NOT NULL AND OLD.reserved_until <= clock_timestamp();  -- W9: an expired turn passes on
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
      END authority;
      -- A released claim is history: never changed or taken back.
      IF OLD.released_at IS NOT NULL
         AND (NEW.released_at, NEW.release_reason, NEW.released_by_session_id, NEW.released_by_actor_id, NEW.reserved_until)
             IS DISTINCT FROM (OLD.released_at, OLD.release_reason, OLD.released_by_session_id, OLD.released_by_actor_id, OLD.reserved_until) THEN
        PERFORM yoke_refuse_with('permission_denied',
          format('claim %s was released at %s (%s); a released claim is history and is never changed or taken back',
            OLD.claim_id, OLD.released_at, OLD.release_reason),
          'take a new claim: yoke coordination-claim acquire --key KEY (or yoke claims item take / steering take)',
          jsonb_build_object('claim_id', OLD.claim_id, 'released_at', OLD.released_at, 'release_reason', OLD.release_reason));
      END IF;
      -- C5: an operator's release of another's claim is recorded (once: the operator's command may have written it first).
      IF yoke_is_service() OR OLD.released_at IS NOT NULL OR NEW.released_at IS NULL
         OR yoke_session_actor(OLD.session_id) = session_user
         OR (OLD.reserved_until IS NOT NULL AND OLD.reserved_until <= clock_timestamp())
         OR (OLD.target_kind IN ('item', 'migration_serialization')
             AND EXISTS (SELECT 1 FROM backlog_items i WHERE i.item_id = OLD.item_id AND i.status = 'done'))
         OR EXISTS (SELECT 1 FROM events e WHERE e.event_type = 'WARNOperatorLeaseRelease' AND e.claim_id = OLD.claim_id) THEN
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
    END `;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION work_claims_user_insert() RETURNS trigger LANGUAGE plpgsql
      SET search_path TO 'public', 'pg_temp' AS $fn$
    DECLARE s sessions; machine text; oldest record;
    BEGIN
      -- C1: a claim is taken with the taker's own session, or it is the line's reserved turn (W7).
      IF NOT yoke_is_service() AND yoke_session_actor(NEW.session_id) IS DISTINCT FROM session_user
         AND NOT (NEW.target_kind = 'qa_admission' AND NEW.reserved_until IS NOT NULL AND yoke_waits_for(NEW.session_id, NEW.scope->>'test_machine')) THEN
        PERFORM yoke_refuse('permission_denied',
          format('%s cannot take a claim for session %s of actor %s: claims are taken with your own session',
            session_user, NEW.session_id, coalesce(yoke_session_actor(NEW.session_id), '(none)')),
          'register your own session (yoke sessions register --session S) and pass it');
      END IF;
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

    CREATE FUNCTION work_claims_user_update() RETURNS trigger LANGUAGE plpgsql
      SET search_path TO 'public', 'pg_temp' AS $fn$
${sql.raw(userUpdateBody)}$fn$;

    DROP TRIGGER work_claims_authority ON work_claims;
    DROP TRIGGER work_claims_take_rules ON work_claims;
    DROP TRIGGER work_claims_authority_update ON work_claims;
    DROP TRIGGER work_claims_delivered_release ON work_claims;
    DROP TRIGGER work_claims_history_kept ON work_claims;
    DROP TRIGGER work_claims_operator_event ON work_claims;
    CREATE TRIGGER work_claims_user_insert BEFORE INSERT ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user()) EXECUTE FUNCTION work_claims_user_insert();
    CREATE TRIGGER work_claims_delivered_release BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user() AND ${delivered}) EXECUTE FUNCTION work_claims_delivered_release();
    CREATE TRIGGER work_claims_user_update BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user() AND NOT ${delivered}) EXECUTE FUNCTION work_claims_user_update();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER work_claims_user_insert ON work_claims;
    DROP TRIGGER work_claims_user_update ON work_claims;
    DROP TRIGGER work_claims_delivered_release ON work_claims;
    DROP FUNCTION work_claims_user_insert();
    DROP FUNCTION work_claims_user_update();
    CREATE TRIGGER work_claims_authority BEFORE INSERT ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user()) EXECUTE FUNCTION work_claims_authority();
    CREATE TRIGGER work_claims_take_rules BEFORE INSERT ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user()) EXECUTE FUNCTION work_claims_take_rules();
    CREATE TRIGGER work_claims_authority_update BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user() AND NOT yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_authority();
    CREATE TRIGGER work_claims_delivered_release BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user() AND yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_delivered_release();
    CREATE TRIGGER work_claims_history_kept BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user() AND OLD.released_at IS NOT NULL) EXECUTE FUNCTION work_claims_history_kept();
    CREATE TRIGGER work_claims_operator_event BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_acts_as_user() AND NOT yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_operator_event();
  `.execute(db);
}
