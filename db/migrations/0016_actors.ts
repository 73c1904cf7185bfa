import { Kysely, sql } from 'kysely';

/**
 * Issue 13: actors are Postgres login roles. Group roles (cluster-wide, so created
 * idempotently: every test database and every deployment's database runs this) mark an
 * actor's kind: `yoke_user` (people and agents), `yoke_admin` (also a yoke_user), `yoke_agent`
 * (a marker beside yoke_user), `yoke_worker` (the Temporal worker). The actor recorded on a
 * session or an event is `session_user`, which a client cannot choose; an admin (or the
 * superuser of the single-user default) may register a session for another actor, and the row
 * says who did. Privileges are granted per database; row-level security follows in
 * 0016_row_security.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- Roles are shared by every database of the cluster: another database's migration may be
    -- creating the same role at this moment, and a lost race is as good as a win.
    DO $$
    DECLARE r text;
    BEGIN
      FOREACH r IN ARRAY ARRAY['yoke_user', 'yoke_admin', 'yoke_agent', 'yoke_worker'] LOOP
        BEGIN
          IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
          END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
      END LOOP;
      BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles a ON a.oid = m.member
                        WHERE g.rolname = 'yoke_user' AND a.rolname = 'yoke_admin') THEN
          GRANT yoke_user TO yoke_admin;
        END IF;
      EXCEPTION WHEN OTHERS THEN
        -- A concurrent grant of the same membership ("tuple concurrently updated"): it exists now.
        NULL;
      END;
    END $$;

    -- The single-user default connects as the superuser: it is an admin.
    CREATE FUNCTION yoke_is_admin() RETURNS boolean STABLE LANGUAGE sql SET search_path = pg_catalog AS $fn$
      SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = session_user AND rolsuper)
          OR pg_has_role(session_user, 'yoke_admin', 'MEMBER')
    $fn$;
    -- Admins and the worker act for everyone (the worker's activities drive every run).
    CREATE FUNCTION yoke_is_service() RETURNS boolean STABLE LANGUAGE sql SET search_path = pg_catalog AS $fn$
      SELECT public.yoke_is_admin() OR pg_has_role(session_user, 'yoke_worker', 'MEMBER')
    $fn$;

    -- A refusal raised in SQL: SQLSTATE YK001, the spec's code in DETAIL, the way out in HINT.
    CREATE FUNCTION yoke_refuse(code text, message text, recovery text) RETURNS void LANGUAGE plpgsql AS $fn$
    BEGIN
      RAISE EXCEPTION USING ERRCODE = 'YK001', MESSAGE = message, DETAIL = code, HINT = recovery;
    END $fn$;

    CREATE FUNCTION yoke_require_admin(doing text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
    BEGIN
      IF NOT public.yoke_is_admin() THEN
        PERFORM public.yoke_refuse('permission_denied',
          format('%s is not an admin, so it cannot %s', session_user, doing),
          'ask an admin to do it, or to make you one: yoke actors add NAME --admin');
      END IF;
    END $fn$;

    -- Creating and dropping roles needs more than an admin actor has; these run as their
    -- owner (the superuser that migrated) after checking the caller is an admin.
    CREATE FUNCTION yoke_add_actor(actor text, secret text, kind text) RETURNS void
      LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $fn$
    BEGIN
      PERFORM public.yoke_require_admin('add actors');
      IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = actor) THEN
        PERFORM public.yoke_refuse('actor_exists', format('a role named %s exists already', actor),
          'choose another name, or remove it first: yoke actors remove ' || actor);
      END IF;
      BEGIN
        EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE %I', actor, secret,
          CASE kind WHEN 'admin' THEN 'yoke_admin' WHEN 'worker' THEN 'yoke_worker' ELSE 'yoke_user' END);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        PERFORM public.yoke_refuse('actor_exists', format('a role named %s exists already', actor),
          'choose another name, or remove it first: yoke actors remove ' || actor);
      END;
      IF kind = 'agent' THEN EXECUTE format('GRANT yoke_agent TO %I', actor); END IF;
    END $fn$;

    CREATE FUNCTION yoke_remove_actor(actor text) RETURNS boolean
      LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $fn$
    BEGIN
      PERFORM public.yoke_require_admin('remove actors');
      IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = actor) THEN RETURN false; END IF;
      -- Only actors yoke made: never a superuser, a group role or someone else's login.
      IF actor IN ('yoke_user', 'yoke_admin', 'yoke_agent', 'yoke_worker')
         OR EXISTS (SELECT 1 FROM pg_roles WHERE rolname = actor AND rolsuper)
         OR NOT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles a ON a.oid = m.member
                         WHERE a.rolname = actor AND g.rolname IN ('yoke_user', 'yoke_admin', 'yoke_worker')) THEN
        PERFORM public.yoke_refuse('permission_denied', format('role %s is not a yoke actor', actor),
          'yoke removes only the actors it added (see yoke actors list)');
      END IF;
      EXECUTE format('DROP ROLE %I', actor);
      RETURN true;
    END $fn$;
    REVOKE EXECUTE ON FUNCTION yoke_add_actor(text, text, text), yoke_remove_actor(text) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION yoke_add_actor(text, text, text), yoke_remove_actor(text) TO yoke_admin;

    -- Who registered a session: its actor, or the admin who registered it for that actor.
    ALTER TABLE sessions ADD COLUMN registered_by text NOT NULL DEFAULT session_user;
    CREATE FUNCTION sessions_registered_by_caller() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      NEW.registered_by := session_user;
      IF NEW.actor_id <> session_user AND NOT public.yoke_is_service() THEN
        PERFORM public.yoke_refuse('permission_denied',
          format('connected as %s, you cannot register a session for actor %s: only an admin names another actor', session_user, NEW.actor_id),
          format('register as yourself (--actor %s, or leave --actor out), or ask an admin', session_user));
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER sessions_registered_by_caller BEFORE INSERT ON sessions
      FOR EACH ROW EXECUTE FUNCTION sessions_registered_by_caller();

    -- Events: the actor is whoever wrote the row, and nobody rewrites the log.
    ALTER TABLE events ADD COLUMN actor_id text NOT NULL DEFAULT session_user;
    CREATE FUNCTION events_written_by_caller() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF TG_OP <> 'INSERT' THEN
        PERFORM public.yoke_refuse('permission_denied', 'the event log is append-only: events are never changed or deleted',
          'record a new event instead');
      END IF;
      NEW.actor_id := session_user;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER events_written_by_caller BEFORE INSERT OR UPDATE OR DELETE ON events
      FOR EACH ROW EXECUTE FUNCTION events_written_by_caller();

    -- Privileges in this database. Row-level security (0016_row_security) narrows the rows.
    GRANT USAGE ON SCHEMA public TO yoke_user, yoke_worker;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO yoke_user, yoke_worker;
    GRANT ALL ON ALL TABLES IN SCHEMA public TO yoke_admin;
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO yoke_user, yoke_worker;
    REVOKE UPDATE, DELETE, TRUNCATE ON events FROM yoke_user, yoke_worker, yoke_admin;
    -- The schema's history belongs to whoever migrates (the superuser).
    REVOKE ALL ON kysely_migration, kysely_migration_lock FROM yoke_user, yoke_worker, yoke_admin;
    GRANT SELECT ON kysely_migration, kysely_migration_lock TO yoke_user, yoke_worker, yoke_admin;
    -- What an admin declares, users and the worker only read.
    REVOKE INSERT, UPDATE, DELETE ON projects, project_grants, environments, flows, deploy_hosts, test_machines,
      pricing_revisions, qa_plans FROM yoke_user, yoke_worker;
    -- Tables later migrations add: readable by every actor, written by admins and the worker
    -- until a migration grants users what they need (the RLS coverage test lists them).
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO yoke_user;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO yoke_worker;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO yoke_admin;
    ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO yoke_user, yoke_worker, yoke_admin;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER events_written_by_caller ON events;
    DROP TRIGGER sessions_registered_by_caller ON sessions;
    DROP FUNCTION events_written_by_caller(), sessions_registered_by_caller(), yoke_add_actor(text, text, text),
      yoke_remove_actor(text), yoke_require_admin(text), yoke_refuse(text, text, text), yoke_is_service(), yoke_is_admin();
    ALTER TABLE events DROP COLUMN actor_id;
    ALTER TABLE sessions DROP COLUMN registered_by;
  `.execute(db);
}
