import { spawn, spawnSync } from 'node:child_process';
import { openSync } from 'node:fs';
import { SEARCH_ATTRIBUTES } from '../domain/searchAttributes';
import { freePort, waitForPort } from './net';

export interface DevServerOptions {
  cli: string;
  port: number;
  uiPort?: number;
  /** SQLite file; omitted means in-memory (tests). */
  dbFile?: string;
  logFile: string;
  namespace?: string;
}

function searchAttributeFlags(): string[] {
  return Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]);
}

/**
 * Starts `temporal server start-dev` detached, with the project's search attributes
 * registered, and waits until its frontend accepts connections. Returns its pid.
 */
export async function startDevServer(opts: DevServerOptions): Promise<number> {
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(opts.port),
    '--log-level',
    'warn',
    '--namespace',
    opts.namespace ?? 'default',
    ...searchAttributeFlags(),
  ];
  if (opts.dbFile) args.push('--db-filename', opts.dbFile);
  if (opts.uiPort) args.push('--ui-port', String(opts.uiPort));
  else args.push('--headless');
  const out = openSync(opts.logFile, 'a');
  const child = spawn(opts.cli, args, { detached: true, stdio: ['ignore', out, out] });
  child.unref();
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) => reject(new Error(`temporal dev server exited with ${code}; see ${opts.logFile}`))),
  );
  await Promise.race([waitForPort(opts.port, '127.0.0.1', 90_000, 'the Temporal dev server'), exited]);
  child.removeAllListeners('exit');
  return child.pid!;
}

/**
 * Starts a dev server on a port that was free a moment ago. Another process may bind that port
 * (or one the server derives from it) before the server does, so a start that fails is retried
 * on a fresh port, twice.
 */
export async function startDevServerOnFreePort(
  opts: Omit<DevServerOptions, 'port'>,
): Promise<{ pid: number; port: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return { pid: await startDevServer({ ...opts, port }), port };
    } catch (err) {
      if (attempt >= 3) throw err;
    }
  }
}

/** Registers the search attributes on a server yoke did not start (idempotent). */
export function registerSearchAttributes(cli: string, address: string, namespace: string): void {
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
    spawnSync(
      cli,
      [
        'operator',
        'search-attribute',
        'create',
        '--address',
        address,
        '--namespace',
        namespace,
        '--name',
        name,
        '--type',
        type,
      ],
      { stdio: 'ignore' },
    );
  }
}
