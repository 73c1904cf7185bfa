import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { createDb } from '../../db/pool';
import { migrateToLatest } from '../../db/migrate';
import { yokeHome } from '../../config/yokeConfig';
import { processAlive } from '../../scripts/net';
import { choosePostgres, withDatabase } from '../../scripts/postgres';
import { findTemporalCli } from '../../scripts/temporalCli';
import { startDevServerOnFreePort } from '../../scripts/temporalServer';

/**
 * Brings up what the tests need, once per run: a Postgres server with a migrated template
 * database (each test file clones its own), and one Temporal dev server (DESIGN.md: one
 * server per run, not one per jest worker). TEMPORAL_ADDRESS, when set, is used instead.
 */
export default async function globalSetup(): Promise<void> {
  const log = (line: string) => process.stderr.write(`[test setup] ${line}\n`);
  const home = yokeHome();
  mkdirSync(home, { recursive: true });
  const pg = await choosePostgres(home, log);
  const template = `yoke_tpl_${process.pid}`;
  const admin = new Client({ connectionString: pg.serverUrl });
  await admin.connect();
  try {
    // Leftovers of an interrupted earlier run: databases named after a process that is gone
    // (another test run going on at the same time keeps its own).
    const stale = await admin.query<{ datname: string }>(
      "SELECT datname FROM pg_database WHERE datname ~ '^yoke_(t|tpl)_[0-9]+'",
    );
    for (const { datname } of stale.rows) {
      const pid = Number(/^yoke_(?:t|tpl)_(\d+)/.exec(datname)![1]);
      if (!processAlive(pid)) await admin.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`);
    }
    await admin.query(`CREATE DATABASE "${template}"`);
  } finally {
    await admin.end();
  }
  const db = createDb(withDatabase(pg.serverUrl, template), { max: 1 });
  await migrateToLatest(db);
  await db.destroy();
  process.env.YOKE_TEST_PG_SERVER = pg.serverUrl;
  process.env.YOKE_TEST_TEMPLATE = template;

  if (process.env.TEMPORAL_ADDRESS) {
    process.env.YOKE_TEST_TEMPORAL_ADDRESS = process.env.TEMPORAL_ADDRESS;
  } else {
    const { pid, port } = await startDevServerOnFreePort({
      cli: findTemporalCli(log),
      logFile: join(home, 'test-temporal.log'),
    });
    process.env.YOKE_TEST_TEMPORAL_ADDRESS = `127.0.0.1:${port}`;
    process.env.YOKE_TEST_TEMPORAL_PID = String(pid);
  }
}
