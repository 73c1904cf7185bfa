import { sql } from 'kysely';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t.drop();
});

// Issue 10 (runs never strand): Postgres may drop a connection at any moment (an outage, a
// restart, a proxy cut). When it drops one a transaction holds between two statements, pg
// reports it as an 'error' event on that client; with no listener it was an uncaught
// exception that ended the whole worker, and every run it drove waited for a restart.
test('issue 10 a connection lost while a transaction holds it between statements fails that transaction, never the process; the pool goes on', async () => {
  const db = t.connect(1);
  const outcome = db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx);
    await sql`SELECT pg_terminate_backend(${rows[0]!.pid})`.execute(t.db);
    await new Promise((done) => setTimeout(done, 300)); // the server's goodbye arrives while no statement runs
    await sql`SELECT 1`.execute(trx);
  });
  await expect(outcome).rejects.toThrow();
  await expect(sql<{ one: number }>`SELECT 1 AS one`.execute(db)).resolves.toMatchObject({ rows: [{ one: 1 }] });
});
