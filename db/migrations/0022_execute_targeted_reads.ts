import { Kysely, sql } from 'kysely';
import * as executeRoundTrips from './0022_execute_round_trips';

/**
 * Issue 16, execute's read costs what the run targets, not what the project holds
 * (0022_execute_round_trips measured on the bench's project of 101 environments: the read's
 * environment filter ran a subquery per environment, and pinning every environment's URL in
 * yoke_execute cost more than the rest of the write).
 *
 * - `yoke_execute_context` finds the names the run may target once (its target and every
 *   stage target of its flow and of the flow it pinned), then those environments by their
 *   keys, with their URLs, so the caller pins them itself and yoke_execute never builds the
 *   project's whole URL map. Each member carries its obligations (one pass over the members
 *   instead of two); the caller lists them in item and case order as before.
 * - `yoke_lock_origins` keeps one generic plan: its check is planned again on every call
 *   otherwise, because a custom plan of it looks cheaper than the generic one.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION yoke_execute_context(the_run text, the_project integer, the_flow integer) RETURNS json
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE project_name text; flow_row json; default_flow integer; target integer; targets text[];
    BEGIN
      SELECT p.name, to_json(f), (SELECT d.flow_id FROM flows d WHERE d.project_id = p.project_id AND d.completion_flow LIMIT 1),
             r.target_environment_id,
             ARRAY(SELECT s.value->>'target' FROM jsonb_array_elements(f.stages || coalesce(r.pinned_flow->'stages', '[]')) s)
        INTO project_name, flow_row, default_flow, target, targets
        FROM deployment_runs r, flows f, projects p
       WHERE r.run_id = the_run AND f.flow_id = the_flow AND p.project_id = the_project;
      IF NOT FOUND THEN RETURN NULL; END IF;
      RETURN json_build_object(
          'project', project_name,
          'flow', flow_row,
          'default_completion_flow_id', default_flow,
          'environments',
            (SELECT coalesce(json_agg(json_build_object('environment_id', e.environment_id, 'name', e.name, 'url', e.url,
                      'tier', e.tier, 'occupancy_unit', e.occupancy_unit)), '[]')
               FROM environments e
              WHERE e.environment_id = target OR (e.project_id = the_project AND e.name = ANY (targets))),
          'members',
            (SELECT coalesce(json_agg(json_build_object('item_id', m.item_id, 'item', member.item,
                      'project_id', i.project_id, 'status', i.status, 'completion_flow_id', i.completion_flow_id,
                      'delivery_intent', m.delivery_intent, 'requirement_selection', m.requirement_selection,
                      'obligations',
                        (SELECT coalesce(json_agg(json_build_object('item_id', c.item_id, 'case_key', c.case_key,
                                  'qa_phase', c.qa_phase, 'target_env', c.target_env, 'plan_id', c.plan_id,
                                  'blocking', c.blocking, 'waived', c.waived, 'superseded', c.superseded,
                                  'run_id', c.run_id, 'item', member.item) ORDER BY c.case_key), '[]')
                           FROM item_qa_cases c WHERE c.item_id = m.item_id))
                      ORDER BY m.item_id), '[]')
               FROM deployment_run_items m
               JOIN backlog_items i ON i.item_id = m.item_id
               JOIN projects ip ON ip.project_id = i.project_id
               CROSS JOIN LATERAL (SELECT ip.item_prefix || '-' || i.number AS item) member
              WHERE m.run_id = the_run));
    END $fn$;
    ALTER FUNCTION yoke_lock_origins(text, text[]) SET plan_cache_mode = force_generic_plan;
  `.execute(db);
}

/** The functions as 0022_execute_round_trips made them (its column is rebuilt from the runs, as it keeps them). */
export async function down(db: Kysely<any>): Promise<void> {
  await executeRoundTrips.down(db);
  await executeRoundTrips.up(db);
}
