import { sql } from 'kysely';
import type { Executor } from './pool';

/**
 * A transaction-scoped advisory lock on a named unit (an origin, a project's creation line).
 * It is released by commit or rollback, so no code path can leak it. Call it inside a
 * transaction: outside one it would be released as soon as the statement ends.
 */
export async function advisoryXactLock(trx: Executor, unit: string): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended(${unit}, 0))`.execute(trx);
}
