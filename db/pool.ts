import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import { Pool, type PoolConfig } from 'pg';
import type { Database } from './database';

/** A repository function takes the database or a transaction, so it serves inside and outside one. */
export type Executor = Kysely<Database> | Transaction<Database>;

export function createDb(databaseUrl: string, options: Omit<PoolConfig, 'connectionString'> = {}): Kysely<Database> {
  const pool = new Pool({ connectionString: databaseUrl, max: 10, connectionTimeoutMillis: 5_000, ...options });
  // An idle client that loses its server must not crash the process; the next query reconnects.
  pool.on('error', () => undefined);
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
