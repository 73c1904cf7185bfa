import { Kysely, sql } from 'kysely';

/**
 * QA plans declared in the project definition, their executions (Q1, Q2) and per-case results,
 * the leases an execution took on test machines (the W6 place-taking evidence), the served
 * revision path of environments, plan-bound run QA rows, and the one blocking-QA reader (Q5).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE environments ADD COLUMN served_revision_path text NOT NULL DEFAULT '/revision';
    ALTER TABLE deployment_run_qa ADD COLUMN plan_id text;

    CREATE TABLE qa_plans (
      project_id  integer NOT NULL REFERENCES projects,
      plan_id     text NOT NULL,
      definition  jsonb NOT NULL,
      PRIMARY KEY (project_id, plan_id)
    );

    CREATE TABLE qa_plan_executions (
      execution_id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      run_id                text NOT NULL REFERENCES deployment_runs,
      stage_name            text NOT NULL,
      plan_id               text NOT NULL,
      item_id               integer REFERENCES backlog_items,
      -- The plan as it stood at begin: a later apply does not change a running execution.
      plan                  jsonb NOT NULL,
      session_id            text NOT NULL REFERENCES sessions,
      status                text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'passed', 'failed', 'aborted', 'superseded')),
      -- Q1: deployment_start_identity.
      target_environment    text NOT NULL,
      target_url            text,
      served_revision_path  text NOT NULL,
      delivered_commit      text NOT NULL,
      -- Q2: what the target said it serves when the execution began.
      observed_commit       text,
      revision_check        text NOT NULL CHECK (revision_check IN ('match', 'mismatch', 'unverified')),
      revision_detail       text,
      cursor_ordinal        integer NOT NULL DEFAULT 0,
      held_claim_id         integer REFERENCES work_claims,
      aborted_while_holding boolean NOT NULL DEFAULT false,
      began_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
      ended_at              timestamptz,
      release_reason        text,
      CHECK ((status = 'running') = (ended_at IS NULL))
    );
    CREATE INDEX qa_plan_executions_scope ON qa_plan_executions (run_id, stage_name, plan_id, execution_id);
    CREATE INDEX qa_plan_executions_live ON qa_plan_executions (run_id) WHERE status = 'running';

    CREATE TABLE qa_plan_execution_results (
      execution_id            integer NOT NULL REFERENCES qa_plan_executions,
      case_name               text NOT NULL,
      ordinal                 integer NOT NULL,
      kind                    text NOT NULL CHECK (kind IN ('host_reset', 'gate', 'automatic', 'manual')),
      verdict                 text NOT NULL CHECK (verdict IN ('passed', 'failed', 'waived')),
      observed_commit         text,
      revision_check          text NOT NULL CHECK (revision_check IN ('match', 'mismatch', 'unverified')),
      test_machine            text,
      exit_code               integer,
      output_digest           text,
      output_excerpt          text,
      note                    text,
      recorded_by_session_id  text,
      recorded_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (execution_id, case_name)
    );

    -- W6: every lease an execution took on a test machine, kept after release.
    CREATE TABLE qa_plan_execution_leases (
      execution_id  integer NOT NULL REFERENCES qa_plan_executions,
      claim_id      integer NOT NULL REFERENCES work_claims,
      test_machine  text NOT NULL,
      claimed_at    timestamptz NOT NULL,
      PRIMARY KEY (execution_id, claim_id)
    );

    ALTER TABLE qa_test_machine_waits
      ADD CONSTRAINT qa_waits_execution FOREIGN KEY (qa_plan_execution_id) REFERENCES qa_plan_executions;
    CREATE INDEX qa_waits_execution_open ON qa_test_machine_waits (qa_plan_execution_id) WHERE state IN ('waiting', 'reserved');

    -- Q5: the one reader of what a run's QA still owes. One row per outstanding subject:
    -- a waiting member of an item-scoped QA stage once, with its blockers (pending roll-ups,
    -- live executions, plans without a passed execution), and each unresolved blocking run
    -- obligation (pending or failed). With a stage: that stage's subjects plus run obligations
    -- naming no stage. One statement whatever the member count.
    CREATE FUNCTION deployment_qa_stage_outstanding(p_run text, p_stage text DEFAULT NULL)
    RETURNS TABLE (subject_kind text, subject text, stage_name text, status text, blockers text[])
    STABLE LANGUAGE sql AS $fn$
      WITH qa_stages AS (
        SELECT s->>'name' AS name, s->>'scope' AS scope, coalesce(s->'checks', '[]'::jsonb) AS checks
          FROM deployment_runs r JOIN flows f ON f.flow_id = r.flow_id, jsonb_array_elements(f.stages) s
         WHERE r.run_id = p_run AND s->>'kind' = 'qa' AND (p_stage IS NULL OR s->>'name' = p_stage)
      ), members AS (
        SELECT m.item_id, p.item_prefix || '-' || i.number AS item
          FROM deployment_run_items m JOIN backlog_items i ON i.item_id = m.item_id JOIN projects p ON p.project_id = i.project_id
         WHERE m.run_id = p_run
      ), member_blockers AS (
        SELECT st.name AS stage_name, mb.item, b.blocker
          FROM qa_stages st CROSS JOIN members mb
          CROSS JOIN LATERAL (
            SELECT q.check_name AS blocker
              FROM deployment_run_qa q
             WHERE q.run_id = p_run AND q.stage_name = st.name AND q.source = 'item-rollup' AND q.blocking
               AND q.retracted_at IS NULL AND q.status = 'pending' AND q.check_name LIKE mb.item || '/%'
            UNION ALL
            SELECT 'execution ' || e.execution_id || ' running (plan ' || e.plan_id || ')'
              FROM qa_plan_executions e
             WHERE e.run_id = p_run AND e.stage_name = st.name AND e.item_id = mb.item_id AND e.status = 'running'
            UNION ALL
            SELECT 'plan ' || (c->>'plan') || ' has no passed execution'
              FROM jsonb_array_elements(st.checks) c
             WHERE c ? 'plan' AND coalesce((c->>'blocking')::boolean, true)
               AND NOT EXISTS (SELECT 1 FROM qa_plan_executions e
                                WHERE e.run_id = p_run AND e.stage_name = st.name AND e.item_id = mb.item_id
                                  AND e.plan_id = c->>'plan' AND e.status = 'passed')
          ) b
         WHERE st.scope = 'item'
      )
      SELECT 'member'::text, mb.item, mb.stage_name, 'pending'::text, array_agg(mb.blocker ORDER BY mb.blocker)
        FROM member_blockers mb GROUP BY mb.stage_name, mb.item
      UNION ALL
      SELECT 'run_obligation'::text, q.check_name, q.stage_name, q.status, ARRAY[]::text[]
        FROM deployment_run_qa q
       WHERE q.run_id = p_run AND q.blocking AND q.retracted_at IS NULL AND q.status IN ('pending', 'failed')
         AND (p_stage IS NULL OR q.stage_name = p_stage OR q.stage_name IS NULL)
         AND NOT (q.status = 'pending' AND q.source = 'item-rollup'
                  AND q.stage_name IN (SELECT name FROM qa_stages WHERE scope = 'item'))
      ORDER BY 1, 3, 2
    $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP FUNCTION deployment_qa_stage_outstanding(text, text);
    ALTER TABLE qa_test_machine_waits DROP CONSTRAINT qa_waits_execution;
    DROP INDEX qa_waits_execution_open;
    DROP TABLE qa_plan_execution_leases, qa_plan_execution_results, qa_plan_executions, qa_plans;
    ALTER TABLE deployment_run_qa DROP COLUMN plan_id;
    ALTER TABLE environments DROP COLUMN served_revision_path;
  `.execute(db);
}
