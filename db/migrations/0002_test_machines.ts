import { Kysely, sql } from 'kysely';

/**
 * Test machines reached over SSH with a pinned host key, their verification and golden
 * capture history (the health rule of W2 as one SQL function), the waiting line (W1), and
 * the reservation mark on a qa_admission claim (W7).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE test_machines (
      name                  text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$'),
      host                  text NOT NULL,
      port                  integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
      ssh_user              text NOT NULL,
      identity_file         text NOT NULL,
      host_key              text NOT NULL,
      host_key_fingerprint  text NOT NULL,
      host_key_source       text NOT NULL CHECK (host_key_source IN ('host_key_file', 'trust_on_first_use')),
      verify_command        text NOT NULL,
      capture_command       text NOT NULL,
      added_at              timestamptz NOT NULL DEFAULT now()
    );

    -- History outlives the machine row, so no foreign key.
    CREATE TABLE test_machine_checks (
      check_id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      request_id            text UNIQUE,
      test_machine          text NOT NULL,
      kind                  text NOT NULL CHECK (kind IN ('verification', 'golden_capture')),
      passed                boolean NOT NULL,
      reason                text NOT NULL,
      exit_code             integer,
      output_digest         text,
      output_excerpt        text,
      session_id            text,
      qa_plan_execution_id  integer,
      started_at            timestamptz NOT NULL,
      finished_at           timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX test_machine_checks_latest ON test_machine_checks (test_machine, finished_at DESC, check_id DESC);

    -- W2: a host is unhealthy when the newer of its last verification and its last successful
    -- golden capture is a failed verification. A host never checked is not unhealthy.
    CREATE FUNCTION test_machine_unhealthy(machine text) RETURNS boolean STABLE LANGUAGE sql AS $fn$
      SELECT COALESCE((
        SELECT c.kind = 'verification' AND NOT c.passed
          FROM test_machine_checks c
         WHERE c.test_machine = machine AND (c.kind = 'verification' OR c.passed)
         ORDER BY c.finished_at DESC, c.check_id DESC
         LIMIT 1), false)
    $fn$;

    CREATE TABLE qa_test_machine_waits (
      wait_id               integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      test_machine          text NOT NULL,
      session_id            text NOT NULL REFERENCES sessions,
      actor_id              text NOT NULL,
      queued_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
      qa_plan_execution_id  integer,
      state                 text NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'reserved', 'granted', 'cancelled')),
      claim_id              integer REFERENCES work_claims,
      resume_command        text NOT NULL,
      rationale             text NOT NULL,
      settled_at            timestamptz,
      cancel_reason         text,
      CHECK ((state IN ('waiting', 'reserved')) = (settled_at IS NULL)),
      CHECK (state = 'waiting' OR state = 'cancelled' OR claim_id IS NOT NULL)
    );
    -- W5: one open wait per session and machine; joining again keeps the first queued_at.
    CREATE UNIQUE INDEX qa_waits_open ON qa_test_machine_waits (test_machine, session_id) WHERE state IN ('waiting', 'reserved');
    CREATE INDEX qa_waits_line ON qa_test_machine_waits (test_machine, queued_at, wait_id) WHERE state = 'waiting';
    CREATE INDEX qa_waits_session ON qa_test_machine_waits (session_id) WHERE state IN ('waiting', 'reserved');

    -- W7: a qa_admission row with reserved_until set is a reserved turn not yet consumed.
    ALTER TABLE work_claims ADD COLUMN reserved_until timestamptz;
    CREATE INDEX work_claims_reservations ON work_claims (reserved_until) WHERE reserved_until IS NOT NULL AND released_at IS NULL;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE work_claims DROP COLUMN reserved_until;
    DROP TABLE qa_test_machine_waits, test_machine_checks, test_machines;
    DROP FUNCTION test_machine_unhealthy(text);
  `.execute(db);
}
