import { Kysely, sql } from 'kysely';

/**
 * Issues 12 and 13: `yoke deployment-runs update RUN status succeeded` (S5) settles the run
 * under the caller's own role, so the settlement commit (S1) and its effects (S3) write as
 * the run's driver (or a steering seat, the run's R1 rule). Each write stays on the run's own
 * rows:
 *
 * - deployment_run_member_effects: the ledger rows of a run whose settlement committed, for
 *   its closed members, by whoever holds the run's authority.
 * - work_claims: a member's item and migration claims end with its done write (`delivered by
 *   run R`), by whoever holds R's authority, once the item names R among its completed
 *   deliveries; nothing else of the claim changes.
 * - sessions: a holder session left with no claims after R's delivery ends (`settled: no claims
 *   left after run R`), by whoever holds R's authority once R committed; only its end is written.
 *
 * Everything else keeps its rule: the claim and session triggers still refuse any other write
 * of another actor's rows.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- The caller holds the run's R1 authority, and the run exists.
    CREATE FUNCTION yoke_settles_run(run text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM deployment_runs r WHERE r.run_id = run) AND yoke_run_refusal(run, false) IS NULL
    $fn$;

    -- S3: a ledger row of a committed settlement's closed member.
    CREATE FUNCTION yoke_settlement_effect_row(run text, item integer) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT yoke_settles_run(run) AND EXISTS (
        SELECT 1 FROM deployment_runs r JOIN deployment_run_items m ON m.run_id = r.run_id
         WHERE r.run_id = run AND r.settlement_committed_at IS NOT NULL AND m.item_id = item AND m.closed_at IS NOT NULL)
    $fn$;
    CREATE POLICY yoke_user_insert ON deployment_run_member_effects FOR INSERT TO yoke_user
      WITH CHECK (yoke_settlement_effect_row(run_id, item_id));
    CREATE POLICY yoke_user_update ON deployment_run_member_effects FOR UPDATE TO yoke_user
      USING (yoke_settlement_effect_row(run_id, item_id)) WITH CHECK (yoke_settlement_effect_row(run_id, item_id));

    -- S1: the done write's claim release (releaseClaimsOfItems): only released_at and its reason
    -- change, on a live item or migration claim of an item delivered by the run the reason names.
    CREATE FUNCTION yoke_delivered_release(o work_claims, n work_claims) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT o.released_at IS NULL AND n.released_at IS NOT NULL
        AND o.target_kind IN ('item', 'migration_serialization')
        AND (to_jsonb(n) - 'released_at' - 'release_reason' - 'released_by_actor_id')
            = (to_jsonb(o) - 'released_at' - 'release_reason' - 'released_by_actor_id')
        AND n.release_reason LIKE 'delivered by run %'
        AND yoke_settles_run(substr(n.release_reason, 18))
        AND EXISTS (SELECT 1 FROM backlog_items i JOIN deployment_run_items m ON m.item_id = i.item_id
                     WHERE i.item_id = o.item_id AND i.status = 'done' AND m.run_id = substr(n.release_reason, 18)
                       AND coalesce(i.delivery_evidence->'completed_deliveries', '[]'::jsonb)
                           @> jsonb_build_array(jsonb_build_object('run', substr(n.release_reason, 18))))
    $fn$;
    CREATE FUNCTION work_claims_delivered_release() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      NEW.released_by_actor_id := session_user;
      RETURN NEW;
    END $fn$;
    -- Triggers fire in name order: the authority (now split by operation), this release, then
    -- work_claims_operator_event (which writes no event for a done item's claims).
    DROP TRIGGER work_claims_authority ON work_claims;
    CREATE TRIGGER work_claims_authority BEFORE INSERT ON work_claims FOR EACH ROW EXECUTE FUNCTION work_claims_authority();
    CREATE TRIGGER work_claims_authority_update BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (yoke_is_service() OR NOT yoke_delivered_release(OLD, NEW)) EXECUTE FUNCTION work_claims_authority();
    CREATE TRIGGER work_claims_delivered_release BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (NOT yoke_is_service() AND yoke_delivered_release(OLD, NEW))
      EXECUTE FUNCTION work_claims_delivered_release();

    -- S3: the holder_session_end effect; only ended_at and its reason change, on a live session
    -- holding no claims whose claims run R's delivery released.
    CREATE FUNCTION yoke_settlement_ends_session(sid text, reason text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT reason LIKE 'settled: no claims left after run %'
        AND yoke_settles_run(substr(reason, 35))
        AND EXISTS (SELECT 1 FROM deployment_runs r WHERE r.run_id = substr(reason, 35) AND r.settlement_committed_at IS NOT NULL)
        AND EXISTS (SELECT 1 FROM work_claims c WHERE c.session_id = sid AND c.release_reason = 'delivered by run ' || substr(reason, 35))
        AND NOT EXISTS (SELECT 1 FROM work_claims c WHERE c.session_id = sid AND c.released_at IS NULL)
    $fn$;
    CREATE FUNCTION yoke_settlement_session_end(o sessions, n sessions) RETURNS boolean STABLE LANGUAGE sql
      SET search_path = public, pg_temp AS $fn$
      SELECT o.ended_at IS NULL AND o.terminated_at IS NULL AND n.ended_at IS NOT NULL
        AND (to_jsonb(n) - 'ended_at' - 'end_reason') = (to_jsonb(o) - 'ended_at' - 'end_reason')
        AND yoke_settlement_ends_session(o.session_id, n.end_reason)
    $fn$;
    DROP TRIGGER sessions_own_only ON sessions;
    CREATE TRIGGER sessions_own_only BEFORE UPDATE ON sessions FOR EACH ROW
      WHEN (NOT yoke_settlement_session_end(OLD, NEW)) EXECUTE FUNCTION sessions_own_only();
    DROP POLICY yoke_user_update ON sessions;
    CREATE POLICY yoke_user_update ON sessions FOR UPDATE TO yoke_user USING (true)
      WITH CHECK (actor_id = session_user OR (ended_at IS NOT NULL AND yoke_settlement_ends_session(session_id, end_reason)));
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP POLICY yoke_user_update ON sessions;
    CREATE POLICY yoke_user_update ON sessions FOR UPDATE TO yoke_user USING (true) WITH CHECK (actor_id = session_user);
    DROP TRIGGER sessions_own_only ON sessions;
    CREATE TRIGGER sessions_own_only BEFORE UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION sessions_own_only();
    DROP FUNCTION yoke_settlement_session_end(sessions, sessions), yoke_settlement_ends_session(text, text);
    DROP TRIGGER work_claims_delivered_release ON work_claims;
    DROP TRIGGER work_claims_authority ON work_claims;
    DROP TRIGGER work_claims_authority_update ON work_claims;
    CREATE TRIGGER work_claims_authority BEFORE INSERT OR UPDATE ON work_claims FOR EACH ROW EXECUTE FUNCTION work_claims_authority();
    DROP FUNCTION work_claims_delivered_release(), yoke_delivered_release(work_claims, work_claims);
    DROP POLICY yoke_user_insert ON deployment_run_member_effects;
    DROP POLICY yoke_user_update ON deployment_run_member_effects;
    DROP FUNCTION yoke_settlement_effect_row(text, integer), yoke_settles_run(text);
  `.execute(db);
}
