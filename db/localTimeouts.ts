import { sql } from 'kysely';
import type { Executor } from './pool';

/**
 * Bounds the rest of the caller's transaction (set_config with is_local): how long a statement
 * may wait for a lock, and how long one may run. Values are Postgres durations ('500ms', or
 * milliseconds as a bare number). Both in one statement when both are given.
 */
export async function setLocalTimeouts(
  trx: Executor,
  t: { lockTimeout?: string; statementTimeout?: string },
): Promise<void> {
  const settings = [
    ...(t.lockTimeout !== undefined ? [sql`set_config('lock_timeout', ${t.lockTimeout}, true)`] : []),
    ...(t.statementTimeout !== undefined ? [sql`set_config('statement_timeout', ${t.statementTimeout}, true)`] : []),
  ];
  if (settings.length) await sql`SELECT ${sql.join(settings)}`.execute(trx);
}
