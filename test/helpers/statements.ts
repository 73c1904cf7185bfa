import { Kysely, PostgresDialect, type KyselyPlugin } from 'kysely';
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

/**
 * Counts the statements kysely runs (BEGIN and COMMIT of a transaction are not among them), as
 * each result comes back: a hot statement is compiled once (db/compiledOnce.ts), run many times.
 */
export function counting(): KyselyPlugin & { count: number } {
  return {
    count: 0,
    transformQuery(args) {
      return args.node;
    },
    async transformResult(args) {
      this.count++;
      return args.result;
    },
  };
}
