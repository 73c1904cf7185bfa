import { Kysely, sql } from 'kysely';
import { user } from './0043_claimperf_lean_claims';

/**
 * Issue 16, the status-line hook: every UPDATE of a session (the hook's attestation, a
 * heartbeat) ran sessions_own_only, a plpgsql function whose only effect is a refusal when a user
 * changes another actor's session or a session's id, actor or registrar. On a fresh connection
 * (the hook opens one per prompt) compiling and calling it cost 5-6 ms of a 35 ms round trip.
 * Its WHEN now holds that refusal's own condition, the role test inline (0043's, as sessions_end_kept
 * has it), so the function runs only to refuse; the settlement's end of a holder session (S3,
 * 0029) is still tested last, in the WHEN, on the statement's snapshot.
 */
export const guarded = `(${user}
        AND (OLD.actor_id <> session_user OR NEW.session_id <> OLD.session_id OR NEW.actor_id <> OLD.actor_id
             OR NEW.registered_by <> OLD.registered_by)
        AND NOT yoke_settlement_session_end(OLD, NEW))`;

export const ownOnly = (when: string) =>
  sql.raw(`
    DROP TRIGGER sessions_own_only ON sessions;
    CREATE TRIGGER sessions_own_only BEFORE UPDATE ON sessions FOR EACH ROW
      WHEN ${when} EXECUTE FUNCTION sessions_own_only();`);

export async function up(db: Kysely<any>): Promise<void> {
  await ownOnly(guarded).execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await ownOnly('(NOT yoke_settlement_session_end(OLD, NEW))').execute(db);
}
