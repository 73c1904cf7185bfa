import { sql, type Kysely } from 'kysely';
import { Client } from 'pg';
import type { Database } from '../db/database';
import { createDb } from '../db/pool';
import { migrateToLatest } from '../db/migrate';
import { yokeHome } from '../config/yokeConfig';
import { choosePostgres, withDatabase } from '../scripts/postgres';

/** A migrated throwaway database for one benchmark run, dropped afterwards whatever happens. */
export async function withBenchDatabase<T>(
  label: string,
  fn: (bench: { db: Kysely<Database>; postgres: string; url: string }) => Promise<T>,
  poolSize = 2,
): Promise<T> {
  const pg = await choosePostgres(yokeHome(), (l) => process.stderr.write(`${l}\n`));
  const name = `yoke_bench_${label}_${process.pid}`;
  const admin = new Client({ connectionString: pg.serverUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  const url = withDatabase(pg.serverUrl, name);
  const db = createDb(url, { max: poolSize });
  try {
    await migrateToLatest(db);
    return await fn({ db, postgres: pg.source, url });
  } finally {
    await db.destroy();
    await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await admin.end();
  }
}

/**
 * C3: a QA host hold names a registered machine. Benches register theirs directly (they never
 * connect over SSH), so the claim path is measured, not the machine's setup.
 */
export async function registerBenchMachines(db: Kysely<Database>, names: string[]): Promise<void> {
  await sql`INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint,
                                       host_key_source, verify_command, capture_command)
            SELECT n, '127.0.0.1', 22, 'qa', 'none', 'ssh-ed25519 AAAA', 'SHA256:bench', 'host_key_file', 'true', 'true'
              FROM unnest(${names}::text[]) AS n`.execute(db);
}
