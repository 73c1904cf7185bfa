import { Kysely, sql } from 'kysely';

/**
 * Issue 13: an admin-only command refused for a user said "ask an admin to do it, or to make you
 * one: yoke actors add NAME --admin". For the user's own name, that command is refused
 * actor_exists (and its recovery, removing the actor, drops the login): there is no CLI that
 * turns an existing actor into an admin. The recovery now names what works.
 */
const body = (recovery: string) => sql`
  CREATE OR REPLACE FUNCTION yoke_require_admin(doing text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
  BEGIN
    IF NOT public.yoke_is_admin() THEN
      PERFORM public.yoke_refuse('permission_denied',
        format('%s is not an admin, so it cannot %s', session_user, doing),
        ${sql.lit(recovery)});
    END IF;
  END $fn$`;

export async function up(db: Kysely<any>): Promise<void> {
  await body(
    'ask an admin to do it (yoke actors list shows who is one), or to connect you as an admin actor (one added with: yoke actors add NAME --admin)',
  ).execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await body('ask an admin to do it, or to make you one: yoke actors add NAME --admin').execute(db);
}
