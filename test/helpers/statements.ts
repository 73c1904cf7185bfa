import { Kysely, PostgresDialect } from 'kysely';
import { Pool } from 'pg';

/** Runs a read on a one-connection pool of its own and counts the statements it sends. */
export async function countStatements(url: string, read: (db: Kysely<any>) => Promise<unknown>): Promise<number> {
  let statements = 0;
  const db = new Kysely<any>({
    dialect: new PostgresDialect({ pool: new Pool({ connectionString: url, max: 1 }) }),
    log: () => void statements++,
  });
  try {
    await read(db);
  } finally {
    await db.destroy();
  }
  return statements;
}
