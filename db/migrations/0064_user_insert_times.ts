import { Kysely, sql } from 'kysely';
import { user } from './0043_claimperf_lean_claims';

/**
 * Issue 13, for a client that skips the CLI (psql as an actor): 0060 made the server's clock the
 * time of a user's UPDATE, but a user's INSERT still wrote any time it liked:
 *
 * - a session inserted with its heartbeat years ahead was never stale, so the sweep never ended
 *   it nor reclaimed its claims (C5); a live one back-dated its offered_at, which picks the
 *   pricing revision (U12) and the 24-hour cohort (U13). A session inserted already ended is
 *   history (`usage backfill` registers each transcript so, offered when it started): its times
 *   stay as written, but an end ahead of the clock (open for years under an end's name) is now;
 * - a claim inserted with its heartbeat ahead was never stale either;
 * - a wait inserted with an old queued_at went to the front of its machine's line (W5, W7), and
 *   one inserted reserved, settled or holding a claim took a turn no release gave it.
 *
 * A user's insert now writes the server's clock where it wrote a time more than a minute off it
 * (ahead, or for a live session's offered_at, a claim's claimed_at and a wait's queued_at behind
 * too), as 0060 does for updates, and a
 * wait joins its line waiting or is refused. The work_claims rule runs inside the user-only insert
 * trigger a user's claim already fires (as 0061 folded the update rules), so the service's inserts
 * read no further WHEN; the sessions and waits rules are triggers of their own, off the claim path.
 */
const ahead = `clock_timestamp() + interval '1 minute'`;
const behind = `clock_timestamp() - interval '1 minute'`;

const claimInsertTimes = `      -- issue 13: a user's claim is taken and heartbeats at the server's clock
      IF NEW.claimed_at > ${ahead} OR NEW.claimed_at < ${behind} THEN NEW.claimed_at := clock_timestamp(); END IF;
      IF NEW.heartbeat_at > ${ahead} THEN NEW.heartbeat_at := clock_timestamp(); END IF;
`;

/** A session's offered_at off the server's clock: ahead, or behind for a session inserted live. */
const offeredOff = `(NEW.offered_at > ${ahead} OR (NEW.offered_at < ${behind} AND NEW.ended_at IS NULL AND NEW.terminated_at IS NULL))`;

const CLAIM_BEGIN = '    BEGIN\n';

async function rewriteClaimInsert(db: Kysely<any>, from: string, to: string): Promise<void> {
  const { rows } = await sql<{ def: string }>`
    SELECT pg_get_functiondef('work_claims_user_insert()'::regprocedure) AS def
  `.execute(db);
  const def = rows[0]!.def;
  const at = def.indexOf(from);
  if (at < 0 || def.indexOf(from, at + 1) >= 0)
    throw new Error(`work_claims_user_insert: expected ${JSON.stringify(from)} exactly once in its definition`);
  await sql.raw(def.replace(from, to)).execute(db);
}

export async function up(db: Kysely<any>): Promise<void> {
  await rewriteClaimInsert(db, CLAIM_BEGIN, `${CLAIM_BEGIN}${claimInsertTimes}`);
  await sql`
    CREATE FUNCTION sessions_insert_times_now() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      -- an end ahead of the clock is an open session under an end's name: it ends now
      IF NEW.ended_at > ${sql.raw(ahead)} THEN NEW.ended_at := clock_timestamp(); END IF;
      IF NEW.terminated_at > ${sql.raw(ahead)} THEN NEW.terminated_at := clock_timestamp(); END IF;
      IF ${sql.raw(offeredOff)} THEN NEW.offered_at := clock_timestamp(); END IF;
      IF NEW.heartbeat_at > ${sql.raw(ahead)} THEN NEW.heartbeat_at := clock_timestamp(); END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER sessions_insert_times_now BEFORE INSERT ON sessions FOR EACH ROW
      WHEN (${sql.raw(user)} AND (NEW.heartbeat_at > ${sql.raw(ahead)} OR ${sql.raw(offeredOff)}
            OR NEW.ended_at > ${sql.raw(ahead)} OR NEW.terminated_at > ${sql.raw(ahead)}))
      EXECUTE FUNCTION sessions_insert_times_now();

    CREATE FUNCTION qa_waits_user_insert() RETURNS trigger LANGUAGE plpgsql
      SET search_path TO 'public', 'pg_temp' AS $fn$
    BEGIN
      IF NEW.state <> 'waiting' OR NEW.settled_at IS NOT NULL OR NEW.claim_id IS NOT NULL THEN
        PERFORM yoke_refuse_with('permission_denied',
          format('a wait joins the line of %s waiting; only a release reserves a turn and only its take settles it', NEW.test_machine),
          format('join the line: yoke coordination-claim acquire --key QA_HOST:%s --wait', NEW.test_machine),
          jsonb_build_object('test_machine', NEW.test_machine, 'state', NEW.state));
      END IF;
      NEW.queued_at := clock_timestamp();
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER qa_waits_user_insert BEFORE INSERT ON qa_test_machine_waits FOR EACH ROW
      WHEN (${sql.raw(user)} AND (NEW.state <> 'waiting' OR NEW.settled_at IS NOT NULL OR NEW.claim_id IS NOT NULL
            OR NEW.queued_at > ${sql.raw(ahead)} OR NEW.queued_at < ${sql.raw(behind)}))
      EXECUTE FUNCTION qa_waits_user_insert();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER qa_waits_user_insert ON qa_test_machine_waits;
    DROP FUNCTION qa_waits_user_insert();
    DROP TRIGGER sessions_insert_times_now ON sessions;
    DROP FUNCTION sessions_insert_times_now();
  `.execute(db);
  await rewriteClaimInsert(db, `${CLAIM_BEGIN}${claimInsertTimes}`, CLAIM_BEGIN);
}
