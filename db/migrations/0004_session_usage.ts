import { Kysely, sql } from 'kysely';

/**
 * Measured usage per session (U5-U10): absolute per-model bucket totals that each fold
 * replaces, with the reader checkpoint written in the same transaction; immutable pricing
 * catalog revisions (U12); probe sessions are excluded from machine windows (U13).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE sessions ADD COLUMN probe boolean NOT NULL DEFAULT false;
    ALTER TABLE sessions ADD COLUMN requested_model text;
    ALTER TABLE sessions ADD COLUMN requested_effort text;
    ALTER TABLE sessions ADD COLUMN requested_window integer;
    -- U2: served facts are attested by the provider, never copied from a request; NULL until then.
    ALTER TABLE sessions ADD COLUMN served_model text;
    ALTER TABLE sessions ADD COLUMN served_window integer;
    ALTER TABLE sessions ADD COLUMN served_attested_at timestamptz;

    CREATE TABLE session_usage (
      session_id      text PRIMARY KEY REFERENCES sessions,
      harness         text NOT NULL CHECK (harness IN ('claude', 'codex', 'cursor')),
      reader_version  integer NOT NULL,
      status          text NOT NULL CHECK (status IN ('measured', 'partial', 'unavailable')),
      totals          jsonb NOT NULL,
      reasons         jsonb NOT NULL DEFAULT '[]',
      cost_caveat     text,
      checkpoint      jsonb NOT NULL,
      folded_at       timestamptz NOT NULL DEFAULT clock_timestamp()
    );

    CREATE TABLE pricing_revisions (
      revision_id   text PRIMARY KEY,
      effective_at  timestamptz NOT NULL UNIQUE,
      source        text NOT NULL,
      estimated     boolean NOT NULL DEFAULT false,
      rates         jsonb NOT NULL,
      imported_at   timestamptz NOT NULL DEFAULT now()
    );
    -- U12: a revision is immutable once imported; a new price is a new revision.
    CREATE FUNCTION pricing_revisions_immutable() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN RAISE EXCEPTION 'pricing revision % is immutable; import a new revision instead', OLD.revision_id USING ERRCODE = 'P0001'; END
    $fn$;
    CREATE TRIGGER pricing_revisions_immutable BEFORE UPDATE OR DELETE ON pricing_revisions
      FOR EACH ROW EXECUTE FUNCTION pricing_revisions_immutable();
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TABLE pricing_revisions, session_usage;
    DROP FUNCTION pricing_revisions_immutable();
    ALTER TABLE sessions DROP COLUMN probe, DROP COLUMN requested_model, DROP COLUMN requested_effort, DROP COLUMN requested_window,
      DROP COLUMN served_model, DROP COLUMN served_window, DROP COLUMN served_attested_at;
  `.execute(db);
}
