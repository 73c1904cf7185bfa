import { Kysely, sql } from 'kysely';

/**
 * Projects, the sessions claims belong to, backlog items, one work_claims table for every
 * claim kind (C1) with a unique partial index over each exclusivity unit (C3), and the
 * audit event log. Typed as Kysely<any> so later schema changes never break this file.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE projects (
      project_id   integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      name         text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
      item_prefix  text NOT NULL UNIQUE CHECK (item_prefix ~ '^[A-Z][A-Z0-9]{0,15}$'),
      created_at   timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE project_grants (
      project_id  integer NOT NULL REFERENCES projects,
      actor_id    text NOT NULL,
      permission  text NOT NULL,
      granted_at  timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (project_id, actor_id, permission)
    );

    CREATE TABLE sessions (
      session_id     text PRIMARY KEY CHECK (length(session_id) BETWEEN 1 AND 200),
      actor_id       text NOT NULL CHECK (length(actor_id) BETWEEN 1 AND 200),
      project_id     integer REFERENCES projects,
      machine_id     text,
      harness        text NOT NULL DEFAULT 'other' CHECK (harness IN ('claude', 'codex', 'cursor', 'other')),
      offered_at     timestamptz NOT NULL DEFAULT now(),
      heartbeat_at   timestamptz NOT NULL DEFAULT now(),
      ended_at       timestamptz,
      terminated_at  timestamptz,
      end_reason     text
    );

    CREATE TABLE backlog_items (
      item_id     integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      project_id  integer NOT NULL REFERENCES projects,
      number      integer NOT NULL CHECK (number > 0),
      title       text,
      created_at  timestamptz NOT NULL DEFAULT now(),
      UNIQUE (project_id, number)
    );

    CREATE TABLE work_claims (
      claim_id                integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      target_kind             text NOT NULL CHECK (target_kind IN (
                                'item', 'epic_task', 'process', 'steering',
                                'migration_serialization', 'qa_admission', 'route_qualification',
                                'deploy_serialization')),
      scope                   jsonb NOT NULL,
      key                     text,
      project_id              integer REFERENCES projects,
      item_id                 integer REFERENCES backlog_items,
      session_id              text NOT NULL REFERENCES sessions,
      claimed_at              timestamptz NOT NULL DEFAULT now(),
      heartbeat_at            timestamptz NOT NULL DEFAULT now(),
      released_at             timestamptz,
      release_reason          text,
      released_by_session_id  text REFERENCES sessions,
      released_by_actor_id    text,
      CHECK ((released_at IS NULL) = (release_reason IS NULL))
    );

    -- C3: one live holder per exclusivity unit, enforced by the database.
    CREATE UNIQUE INDEX work_claims_live_migration ON work_claims ((scope->>'project_id'), (scope->>'model'))
      WHERE target_kind = 'migration_serialization' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_qa_admission ON work_claims ((scope->>'test_machine'))
      WHERE target_kind = 'qa_admission' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_route_qualification ON work_claims ((scope->>'project_id'), (scope->>'grant_key'))
      WHERE target_kind = 'route_qualification' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_item ON work_claims (item_id)
      WHERE target_kind = 'item' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_steering ON work_claims (project_id)
      WHERE target_kind = 'steering' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_deploy ON work_claims (key)
      WHERE target_kind = 'deploy_serialization' AND released_at IS NULL;

    CREATE INDEX work_claims_session_live ON work_claims (session_id) WHERE released_at IS NULL;
    CREATE INDEX work_claims_key ON work_claims (key, claimed_at);

    CREATE TABLE events (
      event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      event_type  text NOT NULL,
      project_id  integer REFERENCES projects,
      session_id  text,
      claim_id    integer REFERENCES work_claims,
      payload     jsonb NOT NULL DEFAULT '{}',
      created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX events_type ON events (event_type, event_id);
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE events, work_claims, backlog_items, sessions, project_grants, projects`.execute(db);
}
