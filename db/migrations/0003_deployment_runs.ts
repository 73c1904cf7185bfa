import { Kysely, sql } from 'kysely';

/**
 * What runs run on (environments, deploy hosts, flows of stages, item QA obligations) and
 * the runs themselves: idempotent creation (I1), membership with audited removal (D1, D3),
 * run-level QA rows (Q3), stage progress, driver attachment (R1) and occupancy units (O1).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE environments (
      environment_id  integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      project_id      integer NOT NULL REFERENCES projects,
      name            text NOT NULL,
      url             text,
      preview_slug    text,
      tier            text NOT NULL CHECK (tier IN ('preview', 'dev', 'stage', 'production')),
      occupancy_unit  text NOT NULL,
      UNIQUE (project_id, name),
      CHECK (url IS NOT NULL OR preview_slug IS NOT NULL)
    );

    CREATE TABLE deploy_hosts (
      project_id     integer NOT NULL REFERENCES projects,
      name           text NOT NULL,
      host           text NOT NULL,
      port           integer NOT NULL,
      ssh_user       text NOT NULL,
      identity_file  text NOT NULL,
      host_key       text NOT NULL,
      PRIMARY KEY (project_id, name)
    );

    CREATE TABLE flows (
      flow_id           integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      project_id        integer NOT NULL REFERENCES projects,
      name              text NOT NULL,
      delivery_custody  boolean NOT NULL DEFAULT false,
      completion_flow   boolean NOT NULL DEFAULT false,
      stages            jsonb NOT NULL,
      UNIQUE (project_id, name)
    );
    CREATE UNIQUE INDEX flows_one_completion ON flows (project_id) WHERE completion_flow;

    ALTER TABLE backlog_items ADD COLUMN defined_in_project boolean NOT NULL DEFAULT false;

    CREATE TABLE item_qa_cases (
      item_id     integer NOT NULL REFERENCES backlog_items,
      case_key    text NOT NULL,
      qa_phase    text NOT NULL CHECK (qa_phase IN ('pre_merge', 'post_deploy')),
      target_env  text,
      plan_id     text,
      blocking    boolean NOT NULL DEFAULT true,
      waived      boolean NOT NULL DEFAULT false,
      superseded  boolean NOT NULL DEFAULT false,
      run_id      text,
      PRIMARY KEY (item_id, case_key)
    );

    CREATE SEQUENCE deployment_run_numbers;
    CREATE TABLE deployment_runs (
      run_id                  text PRIMARY KEY,
      project_id              integer NOT NULL REFERENCES projects,
      flow_id                 integer NOT NULL REFERENCES flows,
      target_environment_id   integer NOT NULL REFERENCES environments,
      candidate_sha           text NOT NULL,
      status                  text NOT NULL DEFAULT 'created' CHECK (status IN ('created', 'executing', 'succeeded', 'failed', 'cancelled')),
      current_stage           text,
      cursor_ordinal          integer NOT NULL DEFAULT 0,
      create_idempotency_key  text,
      create_request          jsonb NOT NULL,
      created_by_session_id   text REFERENCES sessions,
      created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
      executing_at            timestamptz,
      frozen_at               timestamptz,
      carried_work            jsonb,
      occupancy_released_at   timestamptz,
      settling_at             timestamptz,
      terminal_at             timestamptz,
      terminal_reason         text,
      driver_session_id       text REFERENCES sessions,
      driver_heartbeat_at     timestamptz,
      supersedes_run_id       text REFERENCES deployment_runs,
      superseded_by_run_id    text REFERENCES deployment_runs,
      UNIQUE (project_id, create_idempotency_key)
    );
    CREATE INDEX deployment_runs_executing ON deployment_runs (status) WHERE status = 'executing';

    CREATE TABLE deployment_run_items (
      run_id                   text NOT NULL REFERENCES deployment_runs,
      item_id                  integer NOT NULL REFERENCES backlog_items,
      added_at                 timestamptz NOT NULL DEFAULT clock_timestamp(),
      delivery_intent          text NOT NULL DEFAULT 'final' CHECK (delivery_intent IN ('progress', 'final')),
      requirement_selection    jsonb,
      requirement_snapshot     jsonb,
      containment_attestation  jsonb,
      PRIMARY KEY (run_id, item_id)
    );

    CREATE TABLE deployment_run_item_removals (
      removal_id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      run_id                  text NOT NULL REFERENCES deployment_runs,
      item_id                 integer NOT NULL REFERENCES backlog_items,
      reason                  text NOT NULL,
      removed_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
      removed_by_session_id   text REFERENCES sessions,
      later_run_id            text REFERENCES deployment_runs
    );

    CREATE TABLE deployment_run_qa (
      run_id       text NOT NULL REFERENCES deployment_runs,
      check_name   text NOT NULL,
      source       text NOT NULL CHECK (source IN ('flow-default', 'item-rollup', 'operator')),
      blocking     boolean NOT NULL DEFAULT true,
      status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'passed', 'failed', 'waived')),
      stage_name   text,
      retracted_at timestamptz,
      retraction   text CHECK (retraction IN ('automatic', 'manual')),
      updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (run_id, check_name)
    );

    CREATE TABLE deployment_run_stages (
      run_id       text NOT NULL REFERENCES deployment_runs,
      ordinal      integer NOT NULL,
      name         text NOT NULL,
      kind         text NOT NULL,
      target_env   text NOT NULL,
      status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'waiting', 'passed', 'failed', 'cancelled')),
      started_at   timestamptz,
      finished_at  timestamptz,
      detail       text,
      PRIMARY KEY (run_id, ordinal)
    );

    -- O1: the origins (or preview slugs) a run occupies while executing.
    CREATE TABLE deployment_run_occupancy (
      run_id  text NOT NULL REFERENCES deployment_runs,
      unit    text NOT NULL,
      PRIMARY KEY (run_id, unit)
    );
    CREATE INDEX deployment_run_occupancy_unit ON deployment_run_occupancy (unit);
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TABLE deployment_run_occupancy, deployment_run_stages, deployment_run_qa, deployment_run_item_removals,
      deployment_run_items, deployment_runs, item_qa_cases, flows, deploy_hosts, environments;
    DROP SEQUENCE deployment_run_numbers;
    ALTER TABLE backlog_items DROP COLUMN defined_in_project;
  `.execute(db);
}
