import { Kysely, sql } from 'kysely';

/**
 * C3 W7: a release stamps `released_at` with the wall clock (clock_timestamp()), and the turn it
 * reserves for the oldest waiter, inserted later in the same transaction, took `claimed_at`'s
 * default now(): the transaction's start. The history then showed the next holder's claim
 * beginning 10-40 ms before the previous one ended, as if two sessions held the machine at once.
 * A claim's time is now the wall clock of its insert, so one holder's end precedes the next's start.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE work_claims ALTER COLUMN claimed_at SET DEFAULT clock_timestamp()`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE work_claims ALTER COLUMN claimed_at SET DEFAULT now()`.execute(db);
}
