import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdtempSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, portAnswers } from '../../scripts/net';
import { findTemporalCli } from '../../scripts/temporalCli';
import { startDevServer } from '../../scripts/temporalServer';
import { until } from '../helpers/until';

/**
 * The real processes the fault suite breaks: a TCP proxy in front of Postgres (stopped, it
 * refuses connections and cuts the open ones), a Temporal dev server on a SQLite file it
 * keeps across restarts, and yoke workers as child processes that are killed with SIGKILL.
 */

export interface TcpProxy {
  port: number;
  /** Refuse new connections and cut every open one. */
  stop(): Promise<void>;
  start(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = createServer((client) => {
        const upstream = createConnection(target);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on('close', () => sockets.delete(s));
          s.on('error', () => undefined);
        }
        client.pipe(upstream).pipe(client);
        client.on('close', () => upstream.destroy());
        upstream.on('close', () => client.destroy());
      });
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
  await listen();
  return {
    port,
    stop: async () => {
      const closing = new Promise<void>((r) => (server ? server.close(() => r()) : r()));
      for (const s of sockets) s.destroy();
      await closing;
      server = undefined;
    },
    start: listen,
  };
}

export interface DevServer {
  address: string;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** A Temporal dev server with its history in a SQLite file that survives restarts. */
export async function startFaultTemporal(): Promise<DevServer> {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-fault-temporal-'));
  const cli = findTemporalCli(() => undefined);
  const port = await freePort();
  const opts = { cli, port, dbFile: join(dir, 'temporal.sqlite'), logFile: join(dir, 'temporal.log') };
  let pid = await startDevServer(opts);
  const stop = async () => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      return; // already gone
    }
    for (let i = 0; i < 300 && (await portAnswers(port)); i++) await new Promise((r) => setTimeout(r, 100));
  };
  return {
    address: `127.0.0.1:${port}`,
    restart: async () => {
      await stop();
      pid = await startDevServer(opts);
    },
    stop,
  };
}

export interface WorkerProcess {
  child: ChildProcess;
  output: () => string;
  /** Where its output is kept (every worker of one suite appends to the same file). */
  logFile: string;
  /** Set when it exited without being told to: the suite stops waiting and says so. */
  died: () => string | null;
  kill9(): Promise<void>;
  /** SIGTERM, then wait for a graceful exit. */
  stop(): Promise<void>;
}

const workerLog = join(mkdtempSync(join(tmpdir(), 'yoke-fault-workers-')), 'workers.log');

/** `node dist/workers/main.js` as its own process, ready once it polls its task queue. */
export async function startWorkerProcess(env: NodeJS.ProcessEnv): Promise<WorkerProcess> {
  const root = join(__dirname, '..', '..');
  const child = spawn(process.execPath, [join(root, 'dist', 'workers', 'main.js')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (d: Buffer) => {
    out += d.toString();
    appendFileSync(workerLog, `[worker ${child.pid}] ${d.toString()}`);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let told = false;
  let died: string | null = null;
  const exited = new Promise<void>((r) =>
    child.once('exit', (code, signal) => {
      if (!told)
        died = `worker ${child.pid} exited by itself (${signal ?? `exit ${code}`}); its output:\n${out.slice(-4000)}`;
      r();
    }),
  );
  for (let i = 0; !out.includes('yoke worker polling'); i++) {
    if (child.exitCode !== null || i > 1200) throw new Error(`the worker did not start:\n${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    child,
    output: () => out,
    logFile: workerLog,
    died: () => died,
    kill9: async () => {
      told = true;
      child.kill('SIGKILL');
      await exited;
    },
    stop: async () => {
      told = true;
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** The shared `until` where services die on purpose: a read that throws is asked again. */
export async function pollUntil<T>(
  what: string,
  read: () => Promise<T>,
  ok: (v: T) => boolean,
  seconds = 300,
): Promise<T> {
  const found = await until(
    () => read().catch(() => undefined),
    (v) => v !== undefined && ok(v),
    what,
    { timeoutMs: seconds * 1000, everyMs: 250 },
  );
  return found as T;
}
