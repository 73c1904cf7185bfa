import { Kysely, sql } from 'kysely';

/**
 * U2: a re-registration that names another requested model, effort or window replaces the
 * session's request and records the change as a SessionRequestChanged event (it used to keep
 * the old request silently). A user writes that event for one of its own sessions, in that
 * session's project, and no other. Permissive policies are OR-ed, so this adds the one case
 * beside 0032_event_rule's policy without restating it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE POLICY yoke_user_insert_session_request ON events FOR INSERT TO yoke_user WITH CHECK (
      event_type = 'SessionRequestChanged'
      AND actor_id = session_user
      AND session_id IS NOT NULL
      AND yoke_session_actor(session_id) = session_user
      AND project_id IS NOT DISTINCT FROM (SELECT s.project_id FROM sessions s WHERE s.session_id = events.session_id));
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP POLICY yoke_user_insert_session_request ON events`.execute(db);
}
