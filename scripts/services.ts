import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createDb } from '../db/pool';
import { migrateToLatest } from '../db/migrate';
import { loadConfig, servicesFile, yokeHome } from '../config/yokeConfig';
import { portAnswers, processAlive } from './net';
import { choosePostgres, ensureDatabase, ensureNamedDatabase, givenDatabaseUrl } from './postgres';
import { findTemporalCli } from './temporalCli';
import { registerSearchAttributes, startDevServer } from './temporalServer';
import { createLogger } from '../workers/logger';

/**
 * `node dist/scripts/services.js up|down|status [--owner ID]`: brings up (or reuses) the
 * embedded default stack that `npm start` runs on, and stops what a given owner started.
 */
interface ManagedProcess {
  name: string;
  pid: number;
  owner: string;
}

interface ServicesState {
  databaseUrl?: string;
  databaseSource?: string;
  temporalAddress?: string;
  temporalNamespace?: string;
  webUi?: string | null;
  reservationLifetimeSeconds?: number;
  processes: ManagedProcess[];
}

const logger = createLogger('yoke-services');
const log = (line: string) => logger.info(line);

function readState(home: string): ServicesState {
  const file = servicesFile(home);
  return existsSync(file) ? { processes: [], ...JSON.parse(readFileSync(file, 'utf8')) } : { processes: [] };
}

function writeState(home: string, state: ServicesState): void {
  writeFileSync(servicesFile(home), `${JSON.stringify(state, null, 2)}\n`);
}

async function up(owner: string): Promise<void> {
  const home = yokeHome();
  mkdirSync(home, { recursive: true });
  const state = readState(home);
  state.processes = state.processes.filter((p) => processAlive(p.pid));

  const pg = await choosePostgres(home, log);
  if (pg.startedPid) state.processes.push({ name: 'embedded-postgres', pid: pg.startedPid, owner });
  const given = givenDatabaseUrl();
  const databaseUrl = given ? await ensureNamedDatabase(given, log) : await ensureDatabase(pg.serverUrl, 'yoke');
  const db = createDb(databaseUrl, { max: 1 });
  try {
    const applied = await migrateToLatest(db);
    log(`Postgres (${pg.source}): ${applied.length ? `applied ${applied.join(', ')}` : 'schema up to date'}`);
  } finally {
    await db.destroy();
  }

  const namespace = process.env.TEMPORAL_NAMESPACE ?? 'default';
  let temporalAddress = process.env.TEMPORAL_ADDRESS;
  let webUi: string | null = null;
  if (!temporalAddress) {
    const port = Number(process.env.YOKE_TEMPORAL_PORT ?? 7233);
    const uiPort = Number(process.env.YOKE_TEMPORAL_UI_PORT ?? 8233);
    temporalAddress = `127.0.0.1:${port}`;
    webUi = `http://127.0.0.1:${uiPort}`;
    if (await portAnswers(port)) {
      log(`Temporal: reusing the server on ${temporalAddress}`);
      // A server this run did not start may serve its Web UI elsewhere, or none: name only one that answers.
      if (!(await portAnswers(uiPort))) {
        log(`Temporal: no Web UI answers on ${webUi} (YOKE_TEMPORAL_UI_PORT names the reused server's)`);
        webUi = null;
      }
      registerSearchAttributes(findTemporalCli(log), temporalAddress, namespace);
    } else {
      const cli = findTemporalCli(log);
      log(`Temporal: starting the dev server on ${temporalAddress} (SQLite in ${home}/temporal.sqlite)`);
      const pid = await startDevServer({
        cli,
        port,
        uiPort,
        dbFile: join(home, 'temporal.sqlite'),
        logFile: join(home, 'temporal.log'),
        namespace,
      });
      state.processes.push({ name: 'temporal-dev-server', pid, owner });
    }
  }
  writeState(home, {
    ...state,
    databaseUrl,
    databaseSource: pg.source,
    temporalAddress,
    temporalNamespace: namespace,
    webUi,
    // Issue 3: the lifetime this stack's worker reserves turns for; a CLI run from a shell without
    // YOKE_RESERVATION_LIFETIME_SECONDS reads it here, so every release reserves for as long (unset: the default)
    reservationLifetimeSeconds: process.env.YOKE_RESERVATION_LIFETIME_SECONDS
      ? loadConfig().reservationLifetimeMs / 1000
      : undefined,
  });
}

function down(owner: string | undefined): void {
  const home = yokeHome();
  const state = readState(home);
  const keep: ManagedProcess[] = [];
  for (const p of state.processes) {
    if (owner !== undefined && p.owner !== owner) {
      keep.push(p);
      continue;
    }
    if (processAlive(p.pid)) {
      log(`stopping ${p.name} (pid ${p.pid})`);
      try {
        process.kill(-p.pid, 'SIGTERM'); // detached: its own process group
      } catch {
        process.kill(p.pid, 'SIGTERM');
      }
    }
  }
  writeState(home, { ...state, processes: keep });
}

function status(): void {
  const config = loadConfig();
  const state = readState(config.home);
  console.log(
    JSON.stringify(
      { ...state, processes: state.processes.map((p) => ({ ...p, alive: processAlive(p.pid) })) },
      null,
      2,
    ),
  );
}

async function main(): Promise<void> {
  const [command, ...rest] = process.argv.slice(2);
  const ownerAt = rest.indexOf('--owner');
  const owner = ownerAt >= 0 ? rest[ownerAt + 1] : undefined;
  if (command === 'up') await up(owner ?? String(process.ppid));
  else if (command === 'down') down(owner);
  else if (command === 'status') status();
  else throw new Error('usage: services up|down|status [--owner ID]');
}

main().catch((err) => {
  logger.error(err instanceof Error ? err.message : String(err));
  process.exit(3);
});
