import { Kysely, sql } from 'kysely';
import { user } from './0043_claimperf_lean_claims';
import { delivered } from './0055_claim_user_triggers';

/**
 * Issue 13, for a client that skips the CLI (psql as an actor):
 *
 * - A user wrote its session's or claim's heartbeat into the future (never stale, so the sweep
 *   never reclaimed its liveness-bound claims: C5) and back-dated a release or a session's end
 *   (history falsified). What a user writes there more than a minute ahead of (a heartbeat) or
 *   behind (a release, an end) the server's clock is written as the server's clock.
 * - An operator's release (C8) was accepted from any session of an actor holding a seat
 *   somewhere, or from none: it is made from the live session that holds the steering seat of the
 *   holder's project, as the CLI requires. A release of one's own claim, of a delivered item's,
 *   or of an expired turn (W9) is no operator's and stays as it was.
 *
 * Each WHEN holds its whole condition beside the role test, so a service and a user's ordinary
 * write run no function.
 */
const ahead = `clock_timestamp() + interval '1 minute'`;
const behind = `clock_timestamp() - interval '1 minute'`;

/** A claim's times as the server's clock (work_claims_times_now's body; 0061 runs it from the user triggers). */
export const claimTimesNow = `      IF NEW.heartbeat_at > clock_timestamp() THEN NEW.heartbeat_at := clock_timestamp(); END IF;
      IF OLD.released_at IS NULL AND NEW.released_at < clock_timestamp() THEN NEW.released_at := clock_timestamp(); END IF;
`;
/** When a claim's times are rewritten: a heartbeat ahead of the server's clock, or a release behind it. */
export const claimTimesUnusual = `NEW.heartbeat_at > ${ahead} OR (OLD.released_at IS NULL AND NEW.released_at < ${behind})`;

/** C8: an operator's release comes from the seat's own live session (needs a `project` variable). */
export const operatorSessionRule = `      project := coalesce(OLD.project_id, (SELECT s.project_id FROM sessions s WHERE s.session_id = OLD.session_id));
      IF NEW.released_by_session_id IS NULL OR NOT EXISTS (
           SELECT 1 FROM work_claims c JOIN sessions s ON s.session_id = c.session_id
            WHERE c.target_kind = 'steering' AND c.project_id = project AND c.released_at IS NULL
              AND c.session_id = NEW.released_by_session_id AND s.ended_at IS NULL AND s.terminated_at IS NULL) THEN
        PERFORM yoke_refuse('steering_seat_required',
          format('an operator releases claim %s from the live session holding the steering seat of its holder''s project; %s does not hold it',
                 OLD.claim_id, coalesce('session ' || NEW.released_by_session_id, 'no session')),
          'release from the seat''s session: yoke claims work release --claim-id N --reason R --session S (take the seat first: yoke claims steering take --project P --session S)');
      END IF;
`;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- The server's clock, not the writer's: a heartbeat ahead of it, or a release or an end
    -- behind it, is written as now (as the operator's release already writes its time).
    CREATE FUNCTION sessions_times_now() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF NEW.heartbeat_at > clock_timestamp() THEN NEW.heartbeat_at := clock_timestamp(); END IF;
      IF OLD.ended_at IS NULL AND NEW.ended_at < clock_timestamp() THEN NEW.ended_at := clock_timestamp(); END IF;
      IF OLD.terminated_at IS NULL AND NEW.terminated_at < clock_timestamp() THEN NEW.terminated_at := clock_timestamp(); END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER sessions_times_now BEFORE UPDATE ON sessions FOR EACH ROW
      WHEN (${sql.raw(user)} AND (NEW.heartbeat_at > ${sql.raw(ahead)}
            OR (OLD.ended_at IS NULL AND NEW.ended_at < ${sql.raw(behind)})
            OR (OLD.terminated_at IS NULL AND NEW.terminated_at < ${sql.raw(behind)})))
      EXECUTE FUNCTION sessions_times_now();
    CREATE FUNCTION work_claims_times_now() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
${sql.raw(claimTimesNow)}      RETURN NEW;
    END $fn$;
    CREATE TRIGGER work_claims_times_now BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${sql.raw(user)} AND (${sql.raw(claimTimesUnusual)}))
      EXECUTE FUNCTION work_claims_times_now();

    CREATE FUNCTION work_claims_operator_session() RETURNS trigger LANGUAGE plpgsql
      SET search_path TO 'public', 'pg_temp' AS $fn$
    DECLARE project integer;
    BEGIN
${sql.raw(operatorSessionRule)}      RETURN NEW;
    END $fn$;
    CREATE TRIGGER work_claims_user_update_operator BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${sql.raw(user)} AND OLD.released_at IS NULL AND NEW.released_at IS NOT NULL
            AND yoke_session_actor(OLD.session_id) IS DISTINCT FROM session_user
            AND NOT (OLD.reserved_until IS NOT NULL AND OLD.reserved_until <= clock_timestamp())
            AND NOT ${delivered})
      EXECUTE FUNCTION work_claims_operator_session();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER work_claims_user_update_operator ON work_claims;
    DROP FUNCTION work_claims_operator_session();
    DROP TRIGGER work_claims_times_now ON work_claims;
    DROP FUNCTION work_claims_times_now();
    DROP TRIGGER sessions_times_now ON sessions;
    DROP FUNCTION sessions_times_now();
  `.execute(db);
}
