import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { ensureNamedDatabase, withDatabase } from '../../scripts/postgres';

// Issue 2: `npm start` picks DATABASE_URL when set, then creates the database and migrates it.

async function asAdmin(statement: string): Promise<void> {
  const c = new Client({ connectionString: process.env.YOKE_TEST_PG_SERVER });
  await c.connect();
  try {
    await c.query(statement);
  } finally {
    await c.end();
  }
}

const suffix = `${process.pid}_${randomBytes(4).toString('hex')}`;
const missing = `yoke_t_${suffix}_named`;
const role = `yoke_t_${suffix}_nocreate`;

afterAll(async () => {
  await asAdmin(`DROP DATABASE IF EXISTS "${missing}"`);
  await asAdmin(`DROP ROLE IF EXISTS "${role}"`);
});

test('issue 2 a DATABASE_URL naming a missing database gets it created, and a second start reuses it', async () => {
  const url = withDatabase(process.env.YOKE_TEST_PG_SERVER!, missing);
  const lines: string[] = [];
  expect(await ensureNamedDatabase(url, (l) => lines.push(l))).toBe(url);
  expect(lines).toEqual([`Postgres: created database "${missing}" named by DATABASE_URL`]);
  const c = new Client({ connectionString: url });
  await c.connect();
  await c.end();
  expect(await ensureNamedDatabase(url, (l) => lines.push(l))).toBe(url);
  expect(lines).toHaveLength(1);
});

test('issue 2 a missing database the role may not create is named with the ways to recover', async () => {
  await asAdmin(`CREATE ROLE "${role}" LOGIN NOCREATEDB`);
  const server = new URL(process.env.YOKE_TEST_PG_SERVER!);
  server.username = role;
  server.password = '';
  const url = withDatabase(server.toString(), `${missing}_denied`);
  const err = await ensureNamedDatabase(url, () => undefined).catch((e: Error) => e);
  expect(err).toBeInstanceOf(Error);
  expect((err as Error).message).toContain(`database "${missing}_denied" named by DATABASE_URL does not exist`);
  expect((err as Error).message).toMatch(/permission denied to create database/);
  expect((err as Error).message).toContain('point DATABASE_URL at an existing database');
});
