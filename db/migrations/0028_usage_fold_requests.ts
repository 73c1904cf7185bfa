import { Kysely, sql } from 'kysely';

/**
 * Issues 5 and 13 (U10): `yoke hooks usage --async` records its fold request here, written by
 * the CLI under the caller's own role, and the `session-usage/<session>` workflow's signal is a
 * payload-free nudge. The worker folds only the requests it reads back from this table, so a
 * signal carries no authority: a request for another actor's session is refused
 * `permission_denied` by the database, and a forged signal names no path the worker opens.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE session_usage_fold_requests (
      request_id    bigserial PRIMARY KEY,
      session_id    text NOT NULL REFERENCES sessions,
      harness       text NOT NULL CHECK (harness IN ('claude', 'codex', 'cursor')),
      artifacts     text[] NOT NULL CHECK (cardinality(artifacts) > 0),
      requested_by  text NOT NULL DEFAULT session_user,
      requested_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
      -- set by the worker once the request is folded (or refused, with the refusal)
      done_at       timestamptz,
      outcome       jsonb
    );
    CREATE INDEX session_usage_fold_requests_pending ON session_usage_fold_requests (session_id, request_id)
      WHERE done_at IS NULL;

    -- A request is the caller's own, for the caller's own session; only the worker settles it.
    CREATE FUNCTION session_usage_fold_requests_own() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF NEW.requested_by IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied', format('%s cannot request a fold in the name of %s', session_user, NEW.requested_by),
          'request folds as yourself');
      END IF;
      IF yoke_session_actor(NEW.session_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('session %s belongs to actor %s; %s cannot fold its usage', NEW.session_id,
            coalesce(yoke_session_actor(NEW.session_id), '(none)'), session_user),
          'fold your own sessions (yoke sessions list), or ask an admin');
      END IF;
      IF NEW.done_at IS NOT NULL OR NEW.outcome IS NOT NULL THEN
        PERFORM yoke_refuse('permission_denied', 'only the worker settles a fold request', 'insert the request unsettled');
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER session_usage_fold_requests_own BEFORE INSERT ON session_usage_fold_requests
      FOR EACH ROW EXECUTE FUNCTION session_usage_fold_requests_own();
    CREATE POLICY yoke_user_insert ON session_usage_fold_requests FOR INSERT TO yoke_user
      WITH CHECK (requested_by = session_user AND yoke_session_actor(session_id) = session_user AND done_at IS NULL);
    GRANT SELECT, INSERT ON session_usage_fold_requests TO yoke_user;
    GRANT SELECT, INSERT, UPDATE, DELETE ON session_usage_fold_requests TO yoke_worker;
    GRANT ALL ON session_usage_fold_requests TO yoke_admin;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TABLE session_usage_fold_requests;
    DROP FUNCTION session_usage_fold_requests_own();
  `.execute(db);
}
