import { Kysely, sql } from 'kysely';

/**
 * Issue 8: an approval is recorded in its own columns of the approval stage's row (who, from
 * which session, when) instead of being recognised by the text of `detail`, which stays the
 * human-readable line it was. Existing approvals are carried over from their detail text
 * (`approved by ACTOR (session S)`); their time is the nearest one recorded, when the stage
 * passed (or this migration, for one still waiting).
 *
 * An approval answers one wait: a stage set back to pending (a retried run walks again) loses
 * its approval, as the reset of its detail did before, whatever statement resets it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE deployment_run_stages
      ADD COLUMN approved_by_actor_id text,
      ADD COLUMN approved_by_session_id text,
      ADD COLUMN approved_at timestamptz,
      ADD CONSTRAINT deployment_run_stages_approval_whole
        CHECK ((approved_by_actor_id IS NULL) = (approved_at IS NULL)
               AND (approved_by_session_id IS NULL OR approved_by_actor_id IS NOT NULL)),
      ADD CONSTRAINT deployment_run_stages_approval_kind
        CHECK (approved_by_actor_id IS NULL OR kind = 'approval');

    UPDATE deployment_run_stages
       SET approved_by_actor_id = coalesce(substring(detail FROM '^approved by (.*) \\(session [^)]*\\)$'),
                                           substring(detail FROM 13)),
           approved_by_session_id = substring(detail FROM '^approved by .* \\(session ([^)]*)\\)$'),
           approved_at = coalesce(finished_at, clock_timestamp())
     WHERE kind = 'approval' AND detail LIKE 'approved by %';

    CREATE FUNCTION deployment_run_stages_approval_reset() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    BEGIN
      NEW.approved_by_actor_id := NULL;
      NEW.approved_by_session_id := NULL;
      NEW.approved_at := NULL;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER deployment_run_stages_approval_reset BEFORE UPDATE OF status ON deployment_run_stages
      FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status <> 'pending')
      EXECUTE FUNCTION deployment_run_stages_approval_reset();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER deployment_run_stages_approval_reset ON deployment_run_stages;
    DROP FUNCTION deployment_run_stages_approval_reset();
    ALTER TABLE deployment_run_stages
      DROP COLUMN approved_by_actor_id,
      DROP COLUMN approved_by_session_id,
      DROP COLUMN approved_at;
  `.execute(db);
}
