import { Kysely, sql } from 'kysely';

/**
 * Issue 16, claims (C3): every INSERT and UPDATE of a claim opened, prepared and tested each of
 * the table's ten unique partial "live" indexes, one per claim kind, though a row matches at
 * most one. Opening an index for a statement copies its expressions and predicate out of the
 * relation cache and prepares them, and that was 13 % of the backend's CPU for an
 * acquire+release pair of a test machine (measured by dropping nine of them).
 *
 * The nine kinds other than qa_admission now share one index over (target_kind, unit), where
 * yoke_claim_unit gives each kind's unit as one text: the same columns its own index covered,
 * joined by ':' after a first part that is always an integer, so two units of one kind are
 * equal exactly when their columns were (and a unit with a NULL part is NULL, left
 * unconstrained, as the multi-column index left it). qa_admission keeps its own index: the
 * waiting line, test-machine reads and the release functions look a machine's live claim up by
 * `scope->>'test_machine'`, and that index serves them.
 */
const KINDS_SHARING_THE_INDEX: [index: string, columns: string, kind: string][] = [
  ['work_claims_live_migration', "(scope->>'project_id'), (scope->>'model')", 'migration_serialization'],
  ['work_claims_live_route_qualification', "(scope->>'project_id'), (scope->>'grant_key')", 'route_qualification'],
  ['work_claims_live_item', 'item_id', 'item'],
  ['work_claims_live_steering', 'project_id', 'steering'],
  ['work_claims_live_deploy', 'key', 'deploy_serialization'],
  ['work_claims_live_epic_task', "item_id, (scope->>'task')", 'epic_task'],
  ['work_claims_live_process', "(scope->>'project_id'), (scope->>'process_key')", 'process'],
  ['work_claims_live_path', "(scope->>'project_id'), (scope->>'path')", 'path_claim'],
  ['work_claims_live_strategy_doc', "(scope->>'project_id'), (scope->>'document')", 'strategy_doc_claim'],
];

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_claim_unit(kind text, scope jsonb, key text, project_id integer, item_id integer)
      RETURNS text IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $fn$
      SELECT CASE kind
        WHEN 'migration_serialization' THEN (scope->>'project_id') || ':' || (scope->>'model')
        WHEN 'route_qualification' THEN (scope->>'project_id') || ':' || (scope->>'grant_key')
        WHEN 'item' THEN item_id::text
        WHEN 'steering' THEN project_id::text
        WHEN 'deploy_serialization' THEN key
        WHEN 'epic_task' THEN item_id::text || ':' || (scope->>'task')
        WHEN 'process' THEN (scope->>'project_id') || ':' || (scope->>'process_key')
        WHEN 'path_claim' THEN (scope->>'project_id') || ':' || (scope->>'path')
        WHEN 'strategy_doc_claim' THEN (scope->>'project_id') || ':' || (scope->>'document')
      END
    $fn$;

    CREATE UNIQUE INDEX work_claims_live_unit
      ON work_claims (target_kind, yoke_claim_unit(target_kind, scope, key, project_id, item_id))
      WHERE released_at IS NULL AND target_kind <> 'qa_admission';

    DROP INDEX ${sql.raw(KINDS_SHARING_THE_INDEX.map(([index]) => index).join(', '))};
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const [index, columns, kind] of KINDS_SHARING_THE_INDEX)
    await sql
      .raw(
        `CREATE UNIQUE INDEX ${index} ON work_claims (${columns}) WHERE target_kind = '${kind}' AND released_at IS NULL`,
      )
      .execute(db);
  await sql`
    DROP INDEX work_claims_live_unit;
    DROP FUNCTION yoke_claim_unit(text, jsonb, text, integer, integer);
  `.execute(db);
}
