import { createHash } from 'node:crypto';
import { Kysely, PostgresDialect, sql, type RawBuilder, type Transaction } from 'kysely';
import { Pool, type PoolClient, type PoolConfig } from 'pg';
import type { Database } from './database';

/** A repository function takes the database or a transaction, so it serves inside and outside one. */
export type Executor = Kysely<Database> | Transaction<Database>;

const PREPARED_MARK = '/* yoke:prepared */';

/**
 * Marks a hot statement (issue 16: the one-statement acquire and release) to be sent as a
 * named prepared statement, so each connection plans it once instead of on every call:
 * planning the claim CTE costs more than executing it. The name is a hash of the text, so a
 * statement whose text differs (another claim kind, the line guard) is its own statement.
 */
export function prepared<T>(statement: RawBuilder<T>): RawBuilder<T> {
  return sql<T>`${sql.raw(PREPARED_MARK)}${statement}`;
}

type Query = (...args: unknown[]) => unknown;

/** Postgres refuses a prepared plan whose result columns a migration changed (`SELECT *`, a view's row). */
const PLAN_RESULT_CHANGED = '0A000';

/** Each marked text's digest, computed once per process: the texts are the code's own few statements. */
const digests = new Map<string, string>();
const digestOf = (text: string) => {
  let digest = digests.get(text);
  if (digest === undefined) digests.set(text, (digest = createHash('sha1').update(text).digest('hex').slice(0, 24)));
  return digest;
};

/**
 * Sends marked statements (see `prepared`) with a name; kysely's driver has no other way to.
 * A migration run by another process while this connection lives can change a prepared
 * statement's result type: that call fails once, and the connection's later calls prepare
 * under new names (a retried activity then succeeds) instead of failing until it closes.
 */
function namePreparedStatements(client: PoolClient): void {
  const query = client.query.bind(client) as Query;
  let generation = 0;
  const named: Query = (text, ...rest) => {
    if (!(typeof text === 'string' && text.startsWith(PREPARED_MARK) && Array.isArray(rest[0])))
      return query(text, ...rest);
    const name = `yoke_${generation}_${digestOf(text)}`;
    return (query({ name, text, values: rest[0] }) as Promise<unknown>).catch((err: unknown) => {
      if ((err as { code?: string })?.code === PLAN_RESULT_CHANGED) generation++;
      throw err;
    });
  };
  (client as unknown as { query: Query }).query = named;
}

export function createDb(databaseUrl: string, options: Omit<PoolConfig, 'connectionString'> = {}): Kysely<Database> {
  const pool = new Pool({ connectionString: databaseUrl, max: 10, connectionTimeoutMillis: 5_000, ...options });
  // An idle client that loses its server must not crash the process; the next query reconnects.
  pool.on('error', () => undefined);
  pool.on('connect', (client) => {
    // Nor may a checked-out one (a transaction between two statements): pg emits its loss as an
    // 'error' event, which unheard ended the worker. The transaction's next statement fails
    // instead, and the pool drops the dead connection when it is released.
    client.on('error', () => undefined);
    namePreparedStatements(client);
  });
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
