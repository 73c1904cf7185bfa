import { sql } from 'kysely';
import { prepared } from '../../db/pool';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t.drop();
});

// Hot statements are named prepared statements (issue 16). A worker's connection outlives a
// migration another process runs: a plan whose result columns changed must not fail forever.
test('a prepared statement whose result columns a migration changed fails at most once per connection, then is prepared again', async () => {
  const db = t.connect(1); // one connection, so every call below runs on the one that prepared it
  const read = () => prepared(sql<{ project_id: number }>`SELECT * FROM projects`).execute(db);
  await read();
  await sql`ALTER TABLE projects ADD COLUMN prepared_statement_probe integer`.execute(t.db);
  const first = await read().then(
    () => 'answered',
    (err: { code?: string }) => err.code,
  );
  expect(['answered', '0A000']).toContain(first);
  await expect(read()).resolves.toMatchObject({ rows: [] });
  await expect(read()).resolves.toMatchObject({ rows: [] });
});
