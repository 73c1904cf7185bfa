import { sql } from 'kysely';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke } from '../helpers/cli';

/**
 * Configuration: DATABASE_URL is taken in every form node-postgres and libpq take, and any
 * other value is refused naming the variable and the forms it takes.
 */
let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  await t.drop();
});

test('DATABASE_URL with an empty host and the socket directory as ?host= reaches Postgres through its socket (libpq form)', async () => {
  const { rows } = await sql<{ dirs: string }>`SELECT current_setting('unix_socket_directories') AS dirs`.execute(t.db);
  const socketDir = rows[0]!.dirs.split(',')[0]!.trim();
  const u = new URL(t.url);
  const login = u.password ? `${u.username}:${u.password}` : u.username;
  const url = `postgres://${login}@${u.pathname}?host=${socketDir}&port=${u.port || '5432'}`;
  const registered = await yoke(url, ['sessions', 'register', '--session', 'sock-url', '--actor', 'alice', '--json']);
  expect({ code: registered.code, stderr: registered.stderr }).toEqual({ code: 0, stderr: '' });
  expect(json(registered).session_id).toBe('sock-url');
  const row = await t.db
    .selectFrom('sessions')
    .select('actor_id')
    .where('session_id', '=', 'sock-url')
    .executeTakeFirst();
  expect(row).toEqual({ actor_id: 'alice' });
});

test('a DATABASE_URL that is no postgres:// URL is refused naming the variable and the forms it takes (exit 2)', async () => {
  for (const bad of ['http://db.internal/yoke', 'db.internal:5432/yoke']) {
    const r = await yoke(bad, ['sessions', 'list', '--json']);
    expect(r.code).toBe(2);
    const error = jsonError(r);
    expect(error.code).toBe('invalid_configuration');
    expect(error.details).toEqual({ variable: 'DATABASE_URL' });
    expect(error.message).toContain('postgres://');
  }
});
