import { Kysely, sql } from 'kysely';

/**
 * C10: requirement reads and artifact uploads by a run member keep the stored member's project
 * authority after its membership ends. A member row of deployment_run_items is deleted by
 * remove-item and moved to the successor by a takeover, so the authority is kept in its own
 * record: deployment_run_memberships holds one row per (run, item) ever admitted, with the
 * project stored at admission, written by triggers on deployment_run_items so no path that
 * admits, removes or moves a member can skip it. An ended membership keeps its row, its
 * project and the selection it had. Artifacts are stored in Postgres (sha256 and size derived
 * by the database) under the stored member's project, whatever the uploader's session says.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE deployment_run_memberships (
      run_id                 text NOT NULL REFERENCES deployment_runs ON DELETE CASCADE,
      item_id                integer NOT NULL REFERENCES backlog_items,
      project_id             integer NOT NULL REFERENCES projects,
      admitted_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
      ended_at               timestamptz,
      ended_by               text CHECK (ended_by IN ('removed', 'superseded')),
      later_run_id           text,
      delivery_intent        text,
      requirement_selection  jsonb,
      PRIMARY KEY (run_id, item_id),
      CHECK ((ended_at IS NULL) = (ended_by IS NULL))
    );

    -- Backfill: members now, and members removed before this migration (the latest removal).
    INSERT INTO deployment_run_memberships (run_id, item_id, project_id, admitted_at)
    SELECT m.run_id, m.item_id, i.project_id, m.added_at
      FROM deployment_run_items m JOIN backlog_items i ON i.item_id = m.item_id;
    INSERT INTO deployment_run_memberships (run_id, item_id, project_id, ended_at, ended_by, later_run_id)
    SELECT DISTINCT ON (r.run_id, r.item_id) r.run_id, r.item_id, i.project_id, r.removed_at, 'removed', r.later_run_id
      FROM deployment_run_item_removals r JOIN backlog_items i ON i.item_id = r.item_id
     ORDER BY r.run_id, r.item_id, r.removed_at DESC
    ON CONFLICT DO NOTHING;

    -- Admission stores the item's project; a re-admission after a removal reopens the record
    -- and keeps the project it stored first.
    CREATE FUNCTION deployment_run_membership_admitted() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      INSERT INTO deployment_run_memberships AS s (run_id, item_id, project_id, admitted_at)
      SELECT NEW.run_id, NEW.item_id, i.project_id, NEW.added_at FROM backlog_items i WHERE i.item_id = NEW.item_id
      ON CONFLICT (run_id, item_id) DO UPDATE
        SET ended_at = NULL, ended_by = NULL, later_run_id = NULL, delivery_intent = NULL, requirement_selection = NULL
        WHERE s.ended_at IS NOT NULL;
      RETURN NULL;
    END $fn$;
    CREATE TRIGGER deployment_run_membership_admitted AFTER INSERT ON deployment_run_items
      FOR EACH ROW EXECUTE FUNCTION deployment_run_membership_admitted();

    -- T2 moves a member to the successor: the predecessor's record ends superseded, and the
    -- successor's carries the same stored project.
    CREATE FUNCTION deployment_run_membership_moved() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    DECLARE project integer;
    BEGIN
      UPDATE deployment_run_memberships
         SET ended_at = clock_timestamp(), ended_by = 'superseded', later_run_id = NEW.run_id,
             delivery_intent = OLD.delivery_intent, requirement_selection = OLD.requirement_selection
       WHERE run_id = OLD.run_id AND item_id = OLD.item_id
      RETURNING project_id INTO project;
      INSERT INTO deployment_run_memberships AS s (run_id, item_id, project_id)
      VALUES (NEW.run_id, NEW.item_id, coalesce(project, (SELECT i.project_id FROM backlog_items i WHERE i.item_id = NEW.item_id)))
      ON CONFLICT (run_id, item_id) DO UPDATE
        SET ended_at = NULL, ended_by = NULL, later_run_id = NULL, delivery_intent = NULL, requirement_selection = NULL
        WHERE s.ended_at IS NOT NULL;
      RETURN NULL;
    END $fn$;
    CREATE TRIGGER deployment_run_membership_moved AFTER UPDATE OF run_id ON deployment_run_items
      FOR EACH ROW WHEN (OLD.run_id IS DISTINCT FROM NEW.run_id) EXECUTE FUNCTION deployment_run_membership_moved();

    -- D1 remove-item: the record ends removed, keeping the selection the member had.
    CREATE FUNCTION deployment_run_membership_removed() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      UPDATE deployment_run_memberships
         SET ended_at = clock_timestamp(), ended_by = 'removed',
             delivery_intent = OLD.delivery_intent, requirement_selection = OLD.requirement_selection
       WHERE run_id = OLD.run_id AND item_id = OLD.item_id AND ended_at IS NULL;
      RETURN NULL;
    END $fn$;
    CREATE TRIGGER deployment_run_membership_removed AFTER DELETE ON deployment_run_items
      FOR EACH ROW EXECUTE FUNCTION deployment_run_membership_removed();

    -- A record keeps its run, item and stored project: the authority never changes hands.
    CREATE FUNCTION deployment_run_membership_kept() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF (NEW.run_id, NEW.item_id, NEW.project_id, NEW.admitted_at) IS DISTINCT FROM (OLD.run_id, OLD.item_id, OLD.project_id, OLD.admitted_at) THEN
        PERFORM yoke_refuse('permission_denied', format('the membership record of item %s in run %s keeps its run, item, project and admission', OLD.item_id, OLD.run_id),
          'membership records change only through the member rows (add-item, remove-item, takeover)');
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER deployment_run_membership_kept BEFORE UPDATE ON deployment_run_memberships
      FOR EACH ROW EXECUTE FUNCTION deployment_run_membership_kept();

    CREATE TABLE deployment_run_member_artifacts (
      artifact_id             integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      run_id                  text NOT NULL,
      item_id                 integer NOT NULL,
      project_id              integer NOT NULL REFERENCES projects,
      name                    text NOT NULL CHECK (name ~ '^[^/\\x01-\\x1f]{1,200}$' AND name NOT IN ('.', '..')),
      content                 bytea NOT NULL CHECK (octet_length(content) <= 8388608),
      sha256                  text GENERATED ALWAYS AS (encode(sha256(content), 'hex')) STORED,
      size_bytes              integer GENERATED ALWAYS AS (octet_length(content)) STORED,
      uploaded_by_session_id  text NOT NULL REFERENCES sessions,
      actor_id                text NOT NULL DEFAULT session_user,
      uploaded_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
      FOREIGN KEY (run_id, item_id) REFERENCES deployment_run_memberships ON DELETE CASCADE,
      UNIQUE (run_id, item_id, name, sha256)
    );
    CREATE INDEX deployment_run_member_artifacts_run ON deployment_run_member_artifacts (run_id, uploaded_at);

    -- C10 in the database: an artifact is filed under the stored member's project (never the
    -- caller's choice) and needs a membership record, ended or not; it is written as yourself
    -- with your own session, and never changed.
    CREATE FUNCTION deployment_run_member_artifact_authority() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    DECLARE project integer;
    BEGIN
      IF TG_OP <> 'INSERT' THEN
        PERFORM yoke_refuse('permission_denied', format('artifact %s is kept as uploaded: artifacts are never changed or deleted', OLD.artifact_id),
          'upload a new artifact instead');
      END IF;
      SELECT m.project_id INTO project FROM deployment_run_memberships m WHERE m.run_id = NEW.run_id AND m.item_id = NEW.item_id;
      IF NOT FOUND THEN
        PERFORM yoke_refuse('run_member_unknown',
          format('item %s was never a member of run %s, so nothing is uploaded under a member''s authority', NEW.item_id, NEW.run_id),
          'name a run the item is or was a member of: yoke deployment-runs get RUN member_items membership_removals');
      END IF;
      IF NOT yoke_is_service() AND yoke_session_actor(NEW.uploaded_by_session_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('%s cannot upload in the name of session %s of actor %s', session_user, NEW.uploaded_by_session_id,
            coalesce(yoke_session_actor(NEW.uploaded_by_session_id), '(none)')),
          'upload with your own session');
      END IF;
      NEW.project_id := project;
      NEW.actor_id := session_user;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER deployment_run_member_artifact_authority BEFORE INSERT OR UPDATE OR DELETE ON deployment_run_member_artifacts
      FOR EACH ROW EXECUTE FUNCTION deployment_run_member_artifact_authority();

    -- Row-level security as 0016_row_security: the event trigger already enabled and forced it
    -- with read-for-all and service policies; users write as the rules above say. Membership
    -- records follow the member rows that write them (the run's R1 rule, as deployment_run_items).
    ALTER TABLE deployment_run_memberships ENABLE ROW LEVEL SECURITY;
    ALTER TABLE deployment_run_memberships FORCE ROW LEVEL SECURITY;
    ALTER TABLE deployment_run_member_artifacts ENABLE ROW LEVEL SECURITY;
    ALTER TABLE deployment_run_member_artifacts FORCE ROW LEVEL SECURITY;
    CREATE POLICY yoke_user_insert ON deployment_run_memberships FOR INSERT TO yoke_user
      WITH CHECK (yoke_run_refusal(run_id, false) IS NULL);
    CREATE POLICY yoke_user_update ON deployment_run_memberships FOR UPDATE TO yoke_user USING (true)
      WITH CHECK (yoke_run_refusal(run_id, false) IS NULL OR yoke_run_refusal(later_run_id, false) IS NULL);
    CREATE POLICY yoke_user_insert ON deployment_run_member_artifacts FOR INSERT TO yoke_user
      WITH CHECK (yoke_session_actor(uploaded_by_session_id) = session_user AND project_id = (
        SELECT m.project_id FROM deployment_run_memberships m WHERE m.run_id = deployment_run_member_artifacts.run_id
           AND m.item_id = deployment_run_member_artifacts.item_id));
    GRANT SELECT, INSERT, UPDATE ON deployment_run_memberships TO yoke_user;
    GRANT SELECT, INSERT ON deployment_run_member_artifacts TO yoke_user;
    GRANT SELECT, INSERT, UPDATE, DELETE ON deployment_run_memberships, deployment_run_member_artifacts TO yoke_worker;
    GRANT ALL ON deployment_run_memberships, deployment_run_member_artifacts TO yoke_admin;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TABLE deployment_run_member_artifacts;
    DROP TRIGGER deployment_run_membership_admitted ON deployment_run_items;
    DROP TRIGGER deployment_run_membership_moved ON deployment_run_items;
    DROP TRIGGER deployment_run_membership_removed ON deployment_run_items;
    DROP TABLE deployment_run_memberships;
    DROP FUNCTION deployment_run_member_artifact_authority(), deployment_run_membership_admitted(),
      deployment_run_membership_moved(), deployment_run_membership_removed(), deployment_run_membership_kept();
  `.execute(db);
}
