import { Kysely, sql } from 'kysely';

/**
 * C3: 0059 made a claim's `claimed_at` the wall clock of its insert (clock_timestamp()), but its
 * `heartbeat_at` kept the default now(), the transaction's start: a claim taken late in a
 * transaction (a reserved turn, a re-entry) read as heartbeating before it was claimed. Its first
 * heartbeat is now the same wall clock, taken after `claimed_at` (defaults are evaluated in
 * column order), so a claim never beats before it began.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE work_claims ALTER COLUMN heartbeat_at SET DEFAULT clock_timestamp()`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE work_claims ALTER COLUMN heartbeat_at SET DEFAULT now()`.execute(db);
}
