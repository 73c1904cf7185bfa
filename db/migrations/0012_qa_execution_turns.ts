import { Kysely, sql } from 'kysely';

/**
 * Host turns belong to executions, not only to sessions (W2, W7): two executions begun by the
 * same session each keep their own place in a machine's line, and a claim on a test machine
 * names the execution it was taken for, so one execution never re-enters another's lease.
 *
 * The blocking-QA reader (Q5) becomes set-based: each source (pending roll-ups, running
 * executions, plans without a passed execution) is read once for the run and joined to the
 * members by key, instead of a per-member lateral that matched roll-ups with LIKE. Same rows,
 * same single statement; the cost no longer grows with members times roll-ups.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE work_claims ADD COLUMN qa_plan_execution_id integer REFERENCES qa_plan_executions;

    DROP INDEX qa_waits_open;
    CREATE UNIQUE INDEX qa_waits_open ON qa_test_machine_waits (test_machine, session_id, coalesce(qa_plan_execution_id, 0))
      WHERE state IN ('waiting', 'reserved');

    CREATE INDEX qa_plan_executions_run_item ON qa_plan_executions (run_id, item_id, stage_name, plan_id)
      WHERE item_id IS NOT NULL;

    CREATE OR REPLACE FUNCTION deployment_qa_stage_outstanding(p_run text, p_stage text DEFAULT NULL)
    RETURNS TABLE (subject_kind text, subject text, stage_name text, status text, blockers text[])
    STABLE LANGUAGE sql AS $fn$
      WITH qa_stages AS (
        SELECT s->>'name' AS name, s->>'scope' AS scope, coalesce(s->'checks', '[]'::jsonb) AS checks
          FROM deployment_runs r JOIN flows f ON f.flow_id = r.flow_id, jsonb_array_elements(f.stages) s
         WHERE r.run_id = p_run AND s->>'kind' = 'qa' AND (p_stage IS NULL OR s->>'name' = p_stage)
      ), item_stages AS (
        SELECT name, checks FROM qa_stages WHERE scope = 'item'
      ), members AS (
        SELECT m.item_id, p.item_prefix || '-' || i.number AS item
          FROM deployment_run_items m JOIN backlog_items i ON i.item_id = m.item_id JOIN projects p ON p.project_id = i.project_id
         WHERE m.run_id = p_run
      ), rollups AS (
        -- A roll-up is named <item>/<case>: its item is the part before the first slash.
        SELECT q.stage_name, split_part(q.check_name, '/', 1) AS item, q.check_name AS blocker
          FROM deployment_run_qa q JOIN item_stages st ON st.name = q.stage_name
         WHERE q.run_id = p_run AND q.source = 'item-rollup' AND q.blocking
           AND q.retracted_at IS NULL AND q.status = 'pending'
      ), executions AS (
        SELECT e.execution_id, e.stage_name, e.item_id, e.plan_id, e.status
          FROM qa_plan_executions e JOIN item_stages st ON st.name = e.stage_name
         WHERE e.run_id = p_run AND e.item_id IS NOT NULL AND e.status IN ('running', 'passed')
      ), plan_checks AS (
        SELECT st.name AS stage_name, c->>'plan' AS plan_id
          FROM item_stages st, jsonb_array_elements(st.checks) c
         WHERE c ? 'plan' AND coalesce((c->>'blocking')::boolean, true)
      ), member_blockers AS (
        SELECT r.stage_name, mb.item, r.blocker
          FROM rollups r JOIN members mb ON mb.item = r.item
        UNION ALL
        SELECT e.stage_name, mb.item, 'execution ' || e.execution_id || ' running (plan ' || e.plan_id || ')'
          FROM executions e JOIN members mb ON mb.item_id = e.item_id
         WHERE e.status = 'running'
        UNION ALL
        SELECT pc.stage_name, mb.item, 'plan ' || pc.plan_id || ' has no passed execution'
          FROM plan_checks pc CROSS JOIN members mb
         WHERE NOT EXISTS (SELECT 1 FROM executions e
                            WHERE e.stage_name = pc.stage_name AND e.item_id = mb.item_id
                              AND e.plan_id = pc.plan_id AND e.status = 'passed')
      )
      SELECT * FROM (
        SELECT 'member'::text AS subject_kind, mb.item COLLATE "C" AS subject, mb.stage_name COLLATE "C" AS stage_name,
               'pending'::text AS status, array_agg(mb.blocker ORDER BY mb.blocker COLLATE "C") AS blockers
          FROM member_blockers mb GROUP BY 2, 3
        UNION ALL
        SELECT 'run_obligation'::text, q.check_name, q.stage_name, q.status, ARRAY[]::text[]
          FROM deployment_run_qa q
         WHERE q.run_id = p_run AND q.blocking AND q.retracted_at IS NULL AND q.status IN ('pending', 'failed')
           AND (p_stage IS NULL OR q.stage_name = p_stage OR q.stage_name IS NULL)
           AND NOT (q.status = 'pending' AND q.source = 'item-rollup'
                    AND q.stage_name IN (SELECT name FROM item_stages))
      ) outstanding
      -- Byte order: stable and cheap; a locale's collated sort of a 500-member report cost
      -- more than the rest of the read.
      ORDER BY subject_kind COLLATE "C", stage_name COLLATE "C", subject COLLATE "C"
    $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP INDEX qa_plan_executions_run_item;
    DROP INDEX qa_waits_open;
    CREATE UNIQUE INDEX qa_waits_open ON qa_test_machine_waits (test_machine, session_id) WHERE state IN ('waiting', 'reserved');
    ALTER TABLE work_claims DROP COLUMN qa_plan_execution_id;
  `.execute(db);
}
