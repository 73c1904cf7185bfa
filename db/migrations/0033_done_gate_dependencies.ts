import { Kysely, sql } from 'kysely';

/**
 * D7 (issue 12): ordinary dependencies require done, environment-specific ones done and the
 * completed_deliveries attribution in that environment; delivery-ready already required them,
 * and now the done gate does too, so settlement cannot mark a member done over an unsatisfied
 * dependency. The gate of 0027_authority_holes is kept under another name and wrapped: the
 * dependency reason joins its reasons (and, as there, not_prepared is named only when nothing
 * else is). A dependency that is a prepared member of the same closing run (its stamps for that
 * run committed, so the settlement commit closes both or neither, S2) counts as satisfied,
 * when the run delivers to the environment the dependency names.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER FUNCTION yoke_done_gate_reasons(integer, text, jsonb) RENAME TO yoke_done_gate_reasons_without_dependencies;

    CREATE FUNCTION yoke_done_gate_reasons(item integer, closing text, evidence jsonb) RETURNS text[] STABLE
      LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    DECLARE env text; unmet text; reasons text[] := yoke_done_gate_reasons_without_dependencies(item, closing, evidence);
    BEGIN
      SELECT e.name INTO env FROM deployment_runs r JOIN environments e ON e.environment_id = r.target_environment_id
       WHERE r.run_id = closing;
      SELECT string_agg(yoke_item_ref(di.item_id) || CASE WHEN dd.environment = '' THEN ' done' ELSE ' delivered to ' || dd.environment END,
                        ', ' ORDER BY di.number, dd.environment)
        INTO unmet
        FROM item_dependencies dd JOIN backlog_items di ON di.item_id = dd.depends_on_item_id
       WHERE dd.item_id = item
         AND NOT (di.status = 'done' AND (dd.environment = '' OR coalesce(di.delivery_evidence->'completed_deliveries', '[]'::jsonb)
                                            @> jsonb_build_array(jsonb_build_object('environment', dd.environment))))
         AND NOT ((dd.environment = '' OR dd.environment = env)
                  AND di.delivery_evidence->'rung'->>'run' = closing AND di.delivery_evidence->'preflight'->>'run' = closing
                  AND EXISTS (SELECT 1 FROM deployment_run_items m WHERE m.run_id = closing AND m.item_id = di.item_id));
      IF unmet IS NULL THEN RETURN reasons; END IF;
      RETURN ARRAY(SELECT x FROM unnest(reasons) x WHERE x NOT LIKE 'not_prepared:%')
             || format('dependency_unsatisfied: %s depends on %s', yoke_item_ref(item), unmet);
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP FUNCTION yoke_done_gate_reasons(integer, text, jsonb);
    ALTER FUNCTION yoke_done_gate_reasons_without_dependencies(integer, text, jsonb) RENAME TO yoke_done_gate_reasons;
  `.execute(db);
}
