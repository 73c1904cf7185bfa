import { Kysely, sql } from 'kysely';

/**
 * C11: one WARNOperatorLeaseRelease per operator release, written before the release lands,
 * by one rule. 0027_authority_holes made the claim trigger write it for a user's release of
 * another actor's claim, and the command had to guess beforehand whether the trigger would
 * (restating the trigger's condition in two more queries) and read the event back after.
 * Now the command always writes it first, as it did before 0027, and the trigger writes it
 * only when no event for the claim exists: a raw-SQL release. A claim is released once, so
 * an operator event of that claim is this release's.
 */
// The trigger function of 0027_authority_holes, with or without the skip for a claim whose event exists.
const operatorEvent = (once: boolean) => {
  const skip = once
    ? sql`
         -- the operator's command wrote it already, first (a claim is released once)
         OR EXISTS (SELECT 1 FROM events e WHERE e.event_type = 'WARNOperatorLeaseRelease' AND e.claim_id = OLD.claim_id)`
    : sql``;
  return sql`
    CREATE OR REPLACE FUNCTION work_claims_operator_event() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE project integer;
    BEGIN
      IF yoke_is_service() OR OLD.released_at IS NOT NULL OR NEW.released_at IS NULL
         OR yoke_session_actor(OLD.session_id) = session_user
         OR (OLD.reserved_until IS NOT NULL AND OLD.reserved_until <= clock_timestamp())
         OR (OLD.target_kind IN ('item', 'migration_serialization')
             AND EXISTS (SELECT 1 FROM backlog_items i WHERE i.item_id = OLD.item_id AND i.status = 'done'))${skip} THEN
        RETURN NEW;
      END IF;
      project := coalesce(OLD.project_id, (SELECT s.project_id FROM sessions s WHERE s.session_id = OLD.session_id));
      INSERT INTO events (event_type, project_id, session_id, claim_id, payload)
      VALUES ('WARNOperatorLeaseRelease', project, NEW.released_by_session_id, OLD.claim_id,
              jsonb_build_object('key', OLD.key, 'target_kind', OLD.target_kind,
                                 'sticky', OLD.target_kind IN ('migration_serialization', 'qa_admission'),
                                 'holder_session_id', OLD.session_id, 'operator_session_id', NEW.released_by_session_id,
                                 'operator_actor_id', session_user, 'reason', NEW.release_reason));
      NEW.released_at := clock_timestamp();
      RETURN NEW;
    END $fn$;
  `;
};

export async function up(db: Kysely<any>): Promise<void> {
  await operatorEvent(true).execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await operatorEvent(false).execute(db); // 0027_authority_holes's definition, as it was
}
