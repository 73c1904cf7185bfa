import { Kysely, sql } from 'kysely';
import { userUpdateBody } from './0055_claim_user_triggers';
import {
  claimTimesNow,
  claimTimesUnusual,
  operatorSessionRule,
  up as userTimesAndOperatorSession,
} from './0060_user_times_and_operator_session';

/**
 * Issue 16, claims: 0060 gave work_claims two more user-only BEFORE UPDATE triggers (a user's
 * times as the server's clock; an operator's release from the seat's own session), and Postgres
 * reads and prepares every trigger's WHEN on each statement that updates a row, the service's
 * included: a release went from two WHENs to four. Their rules now run inside the two UPDATE
 * triggers a user's write already fires (exactly one of them: the delivered release's or the
 * other changes'), in the order the four fired in:
 * - work_claims_delivered_release: records the actor, then the times;
 * - work_claims_user_update: the times first (0060's fired before it), then the authority rules,
 *   where an operator's release (the last case the authority block reaches, after its seat and
 *   grant checks) must also come from the seat's own live session, then history and the operator
 *   event as before.
 * The rules and their messages are 0060's, unchanged.
 */
const timesRule = `      IF ${claimTimesUnusual} THEN
${claimTimesNow}      END IF;
`;

const END_AUTHORITY = '      END authority;\n';

/** 0055's body with 0060's rules where its triggers ran them. */
function foldedUpdateBody(): string {
  if (userUpdateBody.split(END_AUTHORITY).length !== 2 || !userUpdateBody.includes('    BEGIN\n'))
    throw new Error('0061: work_claims_user_update has changed shape');
  return userUpdateBody
    .replace('    BEGIN\n', `    BEGIN\n${timesRule}`)
    .replace(
      END_AUTHORITY,
      `      -- C8: an operator releases from the seat's own live session.\n${operatorSessionRule}${END_AUTHORITY}`,
    );
}

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION work_claims_delivered_release() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      NEW.released_by_actor_id := session_user;
${sql.raw(timesRule)}      RETURN NEW;
    END $fn$;
    CREATE OR REPLACE FUNCTION work_claims_user_update() RETURNS trigger LANGUAGE plpgsql
      SET search_path TO 'public', 'pg_temp' AS $fn$
${sql.raw(foldedUpdateBody())}$fn$;
    DROP TRIGGER work_claims_times_now ON work_claims;
    DROP TRIGGER work_claims_user_update_operator ON work_claims;
    DROP FUNCTION work_claims_times_now();
    DROP FUNCTION work_claims_operator_session();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION work_claims_delivered_release() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      NEW.released_by_actor_id := session_user;
      RETURN NEW;
    END $fn$;
    CREATE OR REPLACE FUNCTION work_claims_user_update() RETURNS trigger LANGUAGE plpgsql
      SET search_path TO 'public', 'pg_temp' AS $fn$
${sql.raw(userUpdateBody)}$fn$;
    -- 0060's up also creates sessions_times_now, which 0061 keeps: drop it so 0060 can make it again.
    DROP TRIGGER sessions_times_now ON sessions;
    DROP FUNCTION sessions_times_now();
  `.execute(db);
  await userTimesAndOperatorSession(db);
}
