import { Kysely, sql } from 'kysely';

/**
 * U2: a re-registration that names another requested model, effort or window replaces the
 * session's request and records the change as a SessionRequestChanged event (it used to keep
 * the old request silently). A user writes that event for one of its own live sessions, in
 * that session's project, about that session (payload.session_id) and no claim, and no other.
 *
 * events keeps one user INSERT policy (tableRules: one write policy per command), so this
 * extends the one in force with the new case rather than restating 0032_event_rule's body:
 * whatever that policy allows stays allowed. The policy's comment keeps its previous
 * condition for down().
 */
const SESSION_REQUEST_CHANGED = `(event_type = 'SessionRequestChanged'
      AND actor_id = session_user
      AND session_id IS NOT NULL
      AND yoke_session_actor(session_id) = session_user
      AND claim_id IS NULL
      AND payload->>'session_id' = session_id
      AND project_id IS NOT DISTINCT FROM (SELECT s.project_id FROM sessions s WHERE s.session_id = events.session_id
                                             AND s.ended_at IS NULL AND s.terminated_at IS NULL))`;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    DO $do$
    DECLARE before text;
    BEGIN
      SELECT with_check INTO STRICT before FROM pg_policies
       WHERE schemaname = 'public' AND tablename = 'events' AND policyname = 'yoke_user_insert';
      DROP POLICY yoke_user_insert ON events;
      EXECUTE format('CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK ((%s) OR %s)',
                     before, ${sql.lit(SESSION_REQUEST_CHANGED)});
      EXECUTE format('COMMENT ON POLICY yoke_user_insert ON events IS %L', before);
    END $do$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DO $do$
    DECLARE before text;
    BEGIN
      SELECT obj_description(p.oid, 'pg_policy') INTO STRICT before FROM pg_policy p
       WHERE p.polrelid = 'events'::regclass AND p.polname = 'yoke_user_insert';
      DROP POLICY yoke_user_insert ON events;
      EXECUTE format('CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK (%s)', before);
    END $do$;
  `.execute(db);
}
