import { sql } from 'kysely';
import type { Transaction } from 'kysely';
import type { Database } from './database';

/**
 * A transaction-scoped advisory lock on a named unit (an origin, a project's creation line).
 * It is released by commit or rollback, so no code path can leak it.
 */
export async function advisoryXactLock(trx: Transaction<Database>, unit: string): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended(${unit}, 0))`.execute(trx);
}
