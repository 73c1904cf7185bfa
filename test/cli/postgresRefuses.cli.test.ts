import { sql } from 'kysely';
import { Client } from 'pg';
import { asYokeError } from '../../cli/output';
import { EXIT_CODES } from '../../domain/errors';
import { jsonError, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { sqlActors } from '../helpers/roles';

/**
 * README, Errors and exit codes: Postgres that cannot be reached is exit 3 with the recovery,
 * never `internal_error` ("a bug in yoke", exit 1). Postgres refuses in more ways than a closed
 * port: too many connections, a server shutting down or crashed, a connection lost mid-command.
 */
let t: TestDatabase;
const actors = sqlActors(() => t.url);

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await actors.end();
  await t.drop();
});

test('issue 10 Postgres refusing a connection (too many connections, 53300) exits 3 postgres_unreachable with the recovery, not internal_error', async () => {
  const full = await actors.add('full');
  const admin = new Client({ connectionString: t.url });
  await admin.connect();
  try {
    // the role's connection slots are all taken: Postgres refuses every new connection
    await admin.query(`ALTER ROLE ${full.name} CONNECTION LIMIT 0`);
    const r = await yoke(full.url, ['projects', 'list', '--json']);
    expect(r.code).toBe(3);
    expect(jsonError(r)).toMatchObject({ code: 'postgres_unreachable' });
    expect(jsonError(r).message).toContain('too many connections');
    expect(jsonError(r).recovery).toContain('npm start');
    expect(jsonError(r).recovery).toContain('run the command again');
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
  } finally {
    await admin.query(`ALTER ROLE ${full.name} CONNECTION LIMIT -1`);
    await admin.end();
  }
}, 60_000);

test('issue 10 a connection lost inside a command (Postgres restarted between two statements) is postgres_unreachable, exit 3', async () => {
  const db = t.connect(1);
  let lost: unknown;
  try {
    await db.transaction().execute(async (trx) => {
      const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx);
      await sql`SELECT pg_terminate_backend(${rows[0]!.pid})`.execute(t.db);
      await new Promise((done) => setTimeout(done, 300)); // the goodbye arrives between two statements
      await sql`SELECT 1`.execute(trx);
    });
  } catch (err) {
    lost = err;
  } finally {
    await db.destroy();
  }
  expect(lost).toBeDefined();
  const reported = asYokeError(lost, t.url);
  expect(reported.code).toBe('postgres_unreachable');
  expect(EXIT_CODES[reported.kind]).toBe(3);
});

test('issue 10 a protocol violation in answer to a statement (a bind with the wrong parameter count, 08P01) is yoke bug internal_error, not postgres_unreachable', async () => {
  const c = new Client({ connectionString: t.url });
  await c.connect();
  let bug: unknown;
  try {
    await c.query('SELECT $1::int, $2::int', [1]);
  } catch (err) {
    bug = err;
  } finally {
    await c.end();
  }
  expect((bug as { code?: string }).code).toBe('08P01');
  const reported = asYokeError(bug, t.url);
  expect(reported.code).toBe('internal_error');
  expect(EXIT_CODES[reported.kind]).toBe(1);
});
