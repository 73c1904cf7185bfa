import { Kysely, sql } from 'kysely';

/**
 * Issue 16: the common release is one statement. `yoke_release_own_claim` releases a live
 * claim for its holder (the holder's session, or any live session of the holder's actor, C9)
 * when nothing else is owed: not a reserved turn (W9) and, for a test machine, nobody in its
 * line (W7). It returns the released row, or no row when the caller must take the full path
 * (refusals, operator rules, serving the line), which then runs in its own transaction.
 *
 * It is a VOLATILE plpgsql function, not a CTE, for one reason: the line check must see
 * every wait committed before it holds the line's lock, and only a statement started after
 * the lock (a new snapshot, which each statement of a volatile function takes under READ
 * COMMITTED) can. A joiner that read the holder as live under the same lock has committed
 * its wait by then, so the release sees it and serves the line. SECURITY INVOKER: the
 * caller's policies and the work_claims_authority trigger apply as on any release.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_release_own_claim(claim integer, acting text, reason text) RETURNS SETOF work_claims
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE c work_claims; acting_actor text;
    BEGIN
      -- The line before the claim row: the lock order of every path (db/waits.ts).
      PERFORM pg_advisory_xact_lock(hashtextextended('qa_line:' || (w.scope->>'test_machine'), 0))
         FROM work_claims w WHERE w.claim_id = claim AND w.target_kind = 'qa_admission';
      SELECT * INTO c FROM work_claims WHERE claim_id = claim FOR UPDATE;
      IF NOT FOUND OR c.released_at IS NOT NULL OR c.reserved_until IS NOT NULL THEN RETURN; END IF;
      SELECT s.actor_id INTO acting_actor FROM sessions s
       WHERE s.session_id = acting AND s.ended_at IS NULL AND s.terminated_at IS NULL;
      IF acting_actor IS NULL THEN RETURN; END IF;
      IF c.session_id <> acting
         AND NOT EXISTS (SELECT 1 FROM sessions h WHERE h.session_id = c.session_id AND h.actor_id = acting_actor) THEN
        RETURN;
      END IF;
      IF c.target_kind = 'qa_admission' AND EXISTS (
           SELECT 1 FROM qa_test_machine_waits w
            WHERE w.test_machine = c.scope->>'test_machine' AND w.state IN ('waiting', 'reserved')) THEN
        RETURN;
      END IF;
      RETURN QUERY UPDATE work_claims
                      SET released_at = clock_timestamp(), release_reason = reason,
                          released_by_session_id = acting, released_by_actor_id = acting_actor
                    WHERE claim_id = claim
                RETURNING *;
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP FUNCTION yoke_release_own_claim(integer, text, text)`.execute(db);
}
