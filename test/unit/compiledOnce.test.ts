import {
  type CompiledQuery,
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  sql,
  type DatabaseConnection,
  type QueryResult,
} from 'kysely';
import { compiledOnce } from '../../db/compiledOnce';
import type { Database } from '../../db/database';

/** A Kysely whose driver records what it would send instead of connecting. */
function recording() {
  const sent: CompiledQuery[] = [];
  class Recorder extends DummyDriver {
    override async acquireConnection(): Promise<DatabaseConnection> {
      return {
        executeQuery: async <R>(q: CompiledQuery): Promise<QueryResult<R>> => {
          sent.push(q);
          return { rows: [] };
        },
        streamQuery: () => {
          throw new Error('not streamed');
        },
      };
    }
  }
  const db = new Kysely<Database>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new Recorder(),
      createIntrospector: (k) => new PostgresIntrospector(k),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  });
  return { db, sent };
}

test('issue 16 a compiled-once statement numbers placeholders by first use, sends only those, and keeps its text', async () => {
  const { db, sent } = recording();
  let builds = 0;
  const statement = compiledOnce(['a', 'b', 'c'], (p) => {
    builds++;
    return sql`SELECT ${p.b}::text, ${p.a}::integer, ${p.b}::text`;
  });
  await statement(db, { a: 1, b: 'x', c: 'never sent' });
  await statement(db, { a: 2, b: 'y', c: 'never sent' });
  expect(builds).toBe(1);
  expect(sent.map((q) => q.parameters)).toEqual([
    ['x', 1],
    ['y', 2],
  ]);
  expect(sent[0]!.sql).toContain('SELECT $1::text, $2::integer, $1::text');
  expect(sent[1]!.sql).toBe(sent[0]!.sql);
});

test('issue 16 a compiled-once statement refuses a value written into its text, and a placeholder taken but not used', async () => {
  const { db } = recording();
  const inlined = compiledOnce(['a'], (p) => sql`SELECT ${p.a}, ${42}`);
  await expect(inlined(db, { a: 1 })).rejects.toThrow(/value was written into the text/);
  const unused = compiledOnce(['a', 'b'], (p) => {
    void p.b; // taken, then left out of the text
    return sql`SELECT ${p.a}`;
  });
  await expect(unused(db, { a: 1, b: 2 })).rejects.toThrow(/taken but not used: b/);
});
