import { Kysely, sql } from 'kysely';
import * as executeOrigins from './0021_execute_origins';

/**
 * Issue 16, execute in two statements between BEGIN and COMMIT, the bare transaction's count,
 * and an occupancy check that does not grow with an origin's history.
 *
 * - `deployment_run_occupancy.live`: false only while the row's run does not occupy (O1: an
 *   executing run, or a created successor holding what it took over, whose occupancy is not
 *   released). A trigger on deployment_runs sets it whenever a run starts or stops occupying,
 *   in the statement that changes the run; a row is inserted true. So a row whose run occupies
 *   is always live (the check stays right), and the partial index over live rows holds only the
 *   current holders: the check reads those, not every run that ever occupied the origin. The
 *   check still reads the run's own columns, so a live row whose run stopped occupying (none
 *   today) could only cost a lookup, never refuse.
 * - `yoke_execute_context` is execute's one read (the project, the flow, the environments the
 *   run may target, the members and their obligations). VOLATILE plpgsql, so when it is called
 *   in the statement that locks the run, its read is a statement of its own, on a snapshot taken
 *   after the lock was granted, as the separate read before it was. Of the environments it
 *   reads the run's target and every stage target of its flow and of the flow it pinned, not
 *   every environment of the project: execute picks the units from those.
 * - A first execute pins the flow's stages with the URL of every environment of the project;
 *   `yoke_execute` reads those URLs itself instead of the caller reading and sending them.
 * - `yoke_execute`: the origin locks and the occupancy check (`yoke_lock_origins`, now over
 *   live rows), then, when no other run holds an origin, the freeze and the transition: the
 *   derived selections written back, the roll-ups derived again (a row that no longer belongs
 *   is retracted manual), the occupancy, the stage rows, the run executing under its driver
 *   with a new walk, and the DeploymentRunExecuting event. Each part touches rows no other part
 *   touches. Returns the holder (nothing written) or the new walk.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_run_occupies(status text, supersedes_run_id text, occupancy_released_at timestamptz)
      RETURNS boolean IMMUTABLE LANGUAGE sql AS $fn$
      SELECT (status = 'executing' OR (status = 'created' AND supersedes_run_id IS NOT NULL))
             AND occupancy_released_at IS NULL
    $fn$;

    ALTER TABLE deployment_run_occupancy ADD COLUMN live boolean NOT NULL DEFAULT true;
    UPDATE deployment_run_occupancy o SET live = yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at)
      FROM deployment_runs r WHERE r.run_id = o.run_id;
    CREATE INDEX deployment_run_occupancy_live ON deployment_run_occupancy (unit) WHERE live;

    CREATE FUNCTION yoke_occupancy_follows_run() RETURNS trigger LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    DECLARE occupies boolean := yoke_run_occupies(NEW.status, NEW.supersedes_run_id, NEW.occupancy_released_at);
    BEGIN
      UPDATE deployment_run_occupancy SET live = occupies WHERE run_id = NEW.run_id AND live <> occupies;
      RETURN NULL;
    END $fn$;
    CREATE TRIGGER deployment_runs_occupancy_live AFTER UPDATE ON deployment_runs FOR EACH ROW
      WHEN (yoke_run_occupies(OLD.status, OLD.supersedes_run_id, OLD.occupancy_released_at)
            IS DISTINCT FROM yoke_run_occupies(NEW.status, NEW.supersedes_run_id, NEW.occupancy_released_at))
      EXECUTE FUNCTION yoke_occupancy_follows_run();

    -- The live rows of the origins first, by their index whatever the statistics say (a tiny
    -- table would otherwise be planned as a scan of every row, or driven from every occupying
    -- run), then each one's run by its key.
    CREATE OR REPLACE FUNCTION yoke_lock_origins(executing_run text, origins text[])
      RETURNS TABLE (unit text, run_id text, current_stage text, project text)
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
    #variable_conflict use_column
    DECLARE origin text; held record;
    BEGIN
      FOREACH origin IN ARRAY origins LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('occupancy:' || origin, 0));
      END LOOP;
      FOR held IN SELECT o.unit, o.run_id FROM deployment_run_occupancy o
                   WHERE o.unit = ANY (origins) AND o.live AND o.run_id <> executing_run ORDER BY o.unit LOOP
        RETURN QUERY
          SELECT held.unit, r.run_id, r.current_stage, p.name
            FROM deployment_runs r JOIN projects p ON p.project_id = r.project_id
           WHERE r.run_id = held.run_id AND yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at);
        IF FOUND THEN RETURN; END IF;
      END LOOP;
    END $fn$;

    CREATE FUNCTION yoke_execute_context(the_run text, the_project integer, the_flow integer) RETURNS json
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      RETURN (
        SELECT json_build_object(
          'project', p.name,
          'flow', (SELECT to_json(f) FROM flows f WHERE f.flow_id = the_flow),
          'default_completion_flow_id',
            (SELECT f.flow_id FROM flows f WHERE f.project_id = p.project_id AND f.completion_flow LIMIT 1),
          'environments',
            (SELECT coalesce(json_agg(json_build_object('environment_id', e.environment_id, 'name', e.name,
                      'tier', e.tier, 'occupancy_unit', e.occupancy_unit)), '[]')
               FROM environments e JOIN deployment_runs r ON r.run_id = the_run
              WHERE e.project_id = p.project_id
                AND (e.environment_id = r.target_environment_id
                     OR e.name IN (SELECT s.value->>'target'
                                     FROM flows f, jsonb_array_elements(f.stages || coalesce(r.pinned_flow->'stages', '[]')) s
                                    WHERE f.flow_id = the_flow))),
          'members',
            (SELECT coalesce(json_agg(json_build_object('item_id', m.item_id, 'item', ip.item_prefix || '-' || i.number,
                      'project_id', i.project_id, 'status', i.status, 'completion_flow_id', i.completion_flow_id,
                      'delivery_intent', m.delivery_intent, 'requirement_selection', m.requirement_selection)
                      ORDER BY m.item_id), '[]')
               FROM deployment_run_items m
               JOIN backlog_items i ON i.item_id = m.item_id
               JOIN projects ip ON ip.project_id = i.project_id
              WHERE m.run_id = the_run),
          'obligations',
            (SELECT coalesce(json_agg(json_build_object('item_id', c.item_id, 'case_key', c.case_key,
                      'qa_phase', c.qa_phase, 'target_env', c.target_env, 'plan_id', c.plan_id, 'blocking', c.blocking,
                      'waived', c.waived, 'superseded', c.superseded, 'run_id', c.run_id,
                      'item', ip.item_prefix || '-' || i.number)
                      ORDER BY c.item_id, c.case_key), '[]')
               FROM deployment_run_items m
               JOIN item_qa_cases c ON c.item_id = m.item_id
               JOIN backlog_items i ON i.item_id = c.item_id
               JOIN projects ip ON ip.project_id = i.project_id
              WHERE m.run_id = the_run))
          FROM projects p
         WHERE p.project_id = the_project);
    END $fn$;

    CREATE FUNCTION yoke_execute(executing_run text, origins text[], acting_session text, acting_project integer,
                                 new_selections jsonb, new_roll_ups jsonb, roll_up_patterns text[], new_stages jsonb,
                                 new_carried_work jsonb, new_pinned_flow jsonb)
      RETURNS TABLE (unit text, run_id text, current_stage text, project text, walk integer)
      VOLATILE LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    #variable_conflict use_column
    DECLARE new_walk integer;
    BEGIN
      RETURN QUERY SELECT h.unit, h.run_id, h.current_stage, h.project, NULL::integer
                     FROM yoke_lock_origins(executing_run, origins) h;
      IF FOUND THEN RETURN; END IF;
      WITH selections AS (
             UPDATE deployment_run_items m SET requirement_selection = s.selection
               FROM jsonb_to_recordset(new_selections) AS s(item_id integer, selection jsonb)
              WHERE m.run_id = executing_run AND m.item_id = s.item_id),
           roll_ups AS (
             INSERT INTO deployment_run_qa (run_id, check_name, source, blocking, stage_name, plan_id)
             SELECT executing_run, q.check_name, 'item-rollup', q.blocking, q.stage_name, q.plan_id
               FROM jsonb_to_recordset(new_roll_ups) AS q(check_name text, blocking boolean, stage_name text, plan_id text)
             ON CONFLICT (run_id, check_name) DO UPDATE
               SET retracted_at = NULL, retraction = NULL, updated_at = clock_timestamp()),
           stale AS (
             UPDATE deployment_run_qa q
                SET retracted_at = clock_timestamp(), retraction = 'manual', updated_at = clock_timestamp()
              WHERE q.run_id = executing_run AND q.source = 'item-rollup' AND q.retracted_at IS NULL
                AND q.check_name LIKE ANY (roll_up_patterns)
                AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(new_roll_ups) AS n
                                 WHERE n.value->>'check_name' = q.check_name)),
           occupancy AS (
             INSERT INTO deployment_run_occupancy (run_id, unit)
             SELECT executing_run, u FROM unnest(origins) AS u
             ON CONFLICT DO NOTHING),
           stages AS (
             INSERT INTO deployment_run_stages (run_id, ordinal, name, kind, target_env)
             SELECT executing_run, (s.ordinality - 1)::integer, s.value->>'name', s.value->>'kind', s.value->>'target'
               FROM jsonb_array_elements(new_stages) WITH ORDINALITY AS s
             ON CONFLICT DO NOTHING),
           run AS (
             UPDATE deployment_runs
                SET carried_work = new_carried_work, frozen_at = clock_timestamp(),
                    status = 'executing', executing_at = clock_timestamp(), occupancy_released_at = NULL,
                    terminal_at = NULL, terminal_reason = NULL,
                    driver_session_id = acting_session, driver_heartbeat_at = now(),
                    pinned_flow = coalesce(new_pinned_flow, jsonb_build_object('stages', new_stages, 'environment_urls',
                      (SELECT coalesce(jsonb_object_agg(e.name, e.url), '{}') FROM environments e
                        WHERE e.project_id = acting_project))),
                    walk = walk + 1
              WHERE run_id = executing_run
             RETURNING walk),
           event AS (
             INSERT INTO events (event_type, project_id, session_id, payload)
             SELECT 'DeploymentRunExecuting', acting_project, acting_session,
                    jsonb_build_object('run_id', executing_run, 'units', to_jsonb(origins), 'walk', run.walk)
               FROM run)
      SELECT run.walk INTO new_walk FROM run;
      RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, new_walk;
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP FUNCTION yoke_execute(text, text[], text, integer, jsonb, jsonb, text[], jsonb, jsonb, jsonb);
    DROP FUNCTION yoke_execute_context(text, integer, integer);
    DROP FUNCTION yoke_lock_origins(text, text[]);
    DROP TRIGGER deployment_runs_occupancy_live ON deployment_runs;
    DROP FUNCTION yoke_occupancy_follows_run();
    DROP INDEX deployment_run_occupancy_live;
    ALTER TABLE deployment_run_occupancy DROP COLUMN live;
    DROP FUNCTION yoke_run_occupies(text, text, timestamptz);
  `.execute(db);
  await executeOrigins.up(db);
}
