import { Kysely, sql } from 'kysely';

/**
 * Issue 12 (S2, S3) with issue 15's claim primitives: a delivered member's epic-task claims
 * (`PREFIX-N T###`) and its path claims (`--item PREFIX-N`) end with its done write, as its item
 * and migration claims do (`delivered by run R`). Before, they stayed held on a done item, so the
 * board kept showing them and the holder session was never "left with no claims" for S3 to end.
 *
 * Under a user's own role (the driver's settlement replay), 0029's rule admits such a release
 * only for the item and migration kinds; it now admits the two item-bound primitives too, on the
 * same conditions (only the release changes, the reason names a run the caller settles, and the
 * item is done with that run among its completed deliveries). The operator-release event
 * (C11) is not written for a delivered release: its trigger skips every release that rule admits,
 * where its own function skipped only the item and migration kinds of a done item.
 */
const deliveredRelease = (kinds: string) =>
  sql.raw(`
    CREATE OR REPLACE FUNCTION yoke_delivered_release(o work_claims, n work_claims) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT o.released_at IS NULL AND n.released_at IS NOT NULL
        AND o.target_kind IN (${kinds})
        AND (to_jsonb(n) - 'released_at' - 'release_reason' - 'released_by_actor_id')
            = (to_jsonb(o) - 'released_at' - 'release_reason' - 'released_by_actor_id')
        AND n.release_reason LIKE 'delivered by run %'
        AND yoke_settles_run(substr(n.release_reason, 18))
        AND EXISTS (SELECT 1 FROM backlog_items i JOIN deployment_run_items m ON m.item_id = i.item_id
                     WHERE i.item_id = o.item_id AND i.status = 'done' AND m.run_id = substr(n.release_reason, 18)
                       AND coalesce(i.delivery_evidence->'completed_deliveries', '[]'::jsonb)
                           @> jsonb_build_array(jsonb_build_object('run', substr(n.release_reason, 18))))
    $fn$;`);

// 0034_lean_claim_path's test for a user (neither admin nor worker), named in the trigger's WHEN.
const user = `NOT (pg_catalog.pg_has_role(session_user, 'yoke_admin', 'MEMBER') OR pg_catalog.pg_has_role(session_user, 'yoke_worker', 'MEMBER'))`;

const operatorEventTrigger = (when: string) =>
  sql.raw(`
    DROP TRIGGER work_claims_operator_event ON work_claims;
    CREATE TRIGGER work_claims_operator_event BEFORE UPDATE ON work_claims FOR EACH ROW
      WHEN (${when}) EXECUTE FUNCTION work_claims_operator_event();`);

export async function up(db: Kysely<any>): Promise<void> {
  await deliveredRelease(`'item', 'migration_serialization', 'epic_task', 'path_claim'`).execute(db);
  await operatorEventTrigger(`${user} AND NOT yoke_delivered_release(OLD, NEW)`).execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await operatorEventTrigger(user).execute(db);
  await deliveredRelease(`'item', 'migration_serialization'`).execute(db);
}
