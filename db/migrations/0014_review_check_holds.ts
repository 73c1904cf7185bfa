import { sql, type Kysely } from 'kysely';

/**
 * W8: a check by the machine's own holder keeps the hold. Each check records, under its
 * request id and before it takes the machine, whether its session already held it; the
 * check's end releases only a hold the check itself took. Recorded first, so a retried
 * begin never mistakes its own earlier take for the holder's.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE test_machine_check_holds (
      request_id   text PRIMARY KEY,
      test_machine text NOT NULL,
      session_id   text NOT NULL,
      held_before  boolean NOT NULL,
      recorded_at  timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE test_machine_check_holds`.execute(db);
}
