import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, portAnswers } from '../../scripts/net';
import { projectRoot } from '../../config/yokeConfig';
import { untilTrue } from '../helpers/until';

/**
 * Issue 1 (`npm stop` or Ctrl-C stops what `npm start` started), with the real start.sh and
 * stop.sh over stand-ins: two checkouts, each with a fake worker, dashboard and services script
 * (which logs what it is asked), so nothing real is started or stopped.
 */
const repo = projectRoot(__dirname);

interface Checkout {
  dir: string;
  home: string;
  port: number;
  start: ChildProcess;
  exited: Promise<number | null>;
  /** What start.sh printed so far. */
  stdout: () => string;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const started: number[] = [];
const pidOf = (c: Checkout, name: string) => {
  const pid = Number(readFileSync(join(c.home, `${name}.pid`), 'utf8'));
  started.push(pid);
  return pid;
};

afterAll(() => {
  // whatever a failed assertion left running
  for (const pid of started) if (alive(pid)) process.kill(pid, 'SIGKILL');
});
const servicesLog = (c: Checkout) => readFileSync(join(c.home, 'services.log'), 'utf8');

async function startCheckout(extraEnv: NodeJS.ProcessEnv = {}): Promise<Checkout> {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-checkout-'));
  for (const d of ['scripts', 'dist/config', 'dist/scripts', 'dist/workers', 'bin'])
    mkdirSync(join(dir, d), { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{}\n');
  for (const f of ['start.sh', 'stop.sh']) copyFileSync(join(repo, 'scripts', f), join(dir, 'scripts', f));
  writeFileSync(join(dir, 'scripts/install.sh'), 'true\n');
  copyFileSync(join(repo, 'dist/config/paths.js'), join(dir, 'dist/config/paths.js'));
  writeFileSync(
    join(dir, 'dist/scripts/services.js'),
    `const fs = require('fs'); const { join } = require('path');
const home = require('../config/paths').yokeHome();
fs.mkdirSync(home, { recursive: true });
fs.appendFileSync(join(home, 'services.log'), process.argv.slice(2).join(' ') + '\\n');
if (process.argv[2] === 'up') fs.writeFileSync(join(home, 'services.json'), JSON.stringify({ temporalAddress: 'fake:7233', processes: [] }));
`,
  );
  const lingers = "process.on('SIGTERM', () => process.exit(0));";
  writeFileSync(join(dir, 'dist/workers/main.js'), `setInterval(() => {}, 1e6); ${lingers}\n`);
  writeFileSync(
    join(dir, 'bin/yoke'),
    `require('http').createServer().listen(Number(process.argv[process.argv.indexOf('--port') + 1]), '127.0.0.1'); ${lingers}\n`,
  );
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    YOKE_DASHBOARD_PORT: String(port),
    ...extraEnv,
  };
  const start = spawn('bash', ['scripts/start.sh'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  start.stdout!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => start.on('exit', (code) => resolve(code)));
  const c = { dir, home: extraEnv.YOKE_HOME ?? join(dir, '.yoke'), port, start, exited, stdout: () => out };
  await untilTrue(
    async () => existsSync(join(c.home, 'dashboard.pid')) && (await portAnswers(port)),
    `the fake stack in ${dir} to come up`,
  );
  return c;
}

test("issue 1 npm stop stops only its own checkout's worker and dashboard (recorded pids), and a worker killed with -9 takes the dashboard with it", async () => {
  const [a, b] = [await startCheckout(), await startCheckout()];
  const [aWorker, aDashboard, bWorker, bDashboard] = [
    pidOf(a, 'worker'),
    pidOf(a, 'dashboard'),
    pidOf(b, 'worker'),
    pidOf(b, 'dashboard'),
  ];

  await promisify(execFile)('bash', ['scripts/stop.sh'], { cwd: a.dir, env: { PATH: process.env.PATH } });
  await a.exited;
  expect([alive(aWorker), alive(aDashboard)]).toEqual([false, false]);
  expect([alive(bWorker), alive(bDashboard)]).toEqual([true, true]); // the other checkout's stack runs on
  expect(servicesLog(a)).toMatch(/^down --owner start-\d+$/m); // start.sh's own services
  expect(servicesLog(a)).toMatch(/^down$/m); // and, as before, every service npm start started
  expect(existsSync(join(a.home, 'worker.pid'))).toBe(false);

  process.kill(bWorker, 'SIGKILL');
  expect(await b.exited).not.toBe(0);
  await untilTrue(async () => !alive(bDashboard), 'the dashboard to stop with start.sh');
  expect(await portAnswers(b.port)).toBe(false); // the next npm start can serve on the port
  expect(servicesLog(b)).toMatch(/^down --owner start-\d+$/m);
  expect(existsSync(join(b.home, 'dashboard.pid'))).toBe(false);
}, 60_000);

test('issue 2 a second npm start in a running checkout refuses, naming the running worker, and leaves the first run for npm stop to stop', async () => {
  const a = await startCheckout();
  const [worker, dashboard] = [pidOf(a, 'worker'), pidOf(a, 'dashboard')];
  const second = await new Promise<{ code: number | null; stderr: string }>((resolve) =>
    execFile(
      'bash',
      ['scripts/start.sh'],
      {
        cwd: a.dir,
        env: { PATH: process.env.PATH, HOME: process.env.HOME, YOKE_DASHBOARD_PORT: String(a.port) },
        timeout: 20_000, // a second run that starts up instead of refusing is stopped (its trap stops its children)
      },
      (err, _stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
    ),
  );
  expect(second.code).toBe(1);
  expect(second.stderr).toContain(`already running for this checkout (worker pid ${worker}`);
  expect(second.stderr).toContain('npm stop');
  // Nothing of the first run was touched: its pid files, and no second services up or down.
  expect(readFileSync(join(a.home, 'worker.pid'), 'utf8').trim()).toBe(String(worker));
  expect(readFileSync(join(a.home, 'dashboard.pid'), 'utf8').trim()).toBe(String(dashboard));
  expect(servicesLog(a).trim().split('\n')).toHaveLength(1);

  await promisify(execFile)('bash', ['scripts/stop.sh'], { cwd: a.dir, env: { PATH: process.env.PATH } });
  await a.exited;
  expect([alive(worker), alive(dashboard)]).toEqual([false, false]);
}, 60_000);

test('issue 2 npm start under another YOKE_HOME (or YOKE_SSH_KEY_DIR) names that home and key directory in its hints, not .yoke', async () => {
  const home = mkdtempSync(join(tmpdir(), 'yoke-home-'));
  const a = await startCheckout({ YOKE_HOME: home });
  for (const name of ['worker', 'dashboard']) pidOf(a, name); // recorded for afterAll, should an assertion fail
  await untilTrue(async () => a.stdout().includes('Stop:'), 'the start message');
  expect(a.stdout()).toContain(`Postgres:   see ${home}/services.json`);
  expect(a.stdout()).toContain(`mkdir -p ${home}/ssh-keys && ssh-keygen -q -t ed25519 -N '' -f ${home}/ssh-keys/lab-1`);
  expect(a.stdout()).toContain(`--host-key-file ${home}/ssh-keys/lab-1.pub`);
  expect(a.stdout()).not.toContain('.yoke');
  await promisify(execFile)('bash', ['scripts/stop.sh'], {
    cwd: a.dir,
    env: { PATH: process.env.PATH, YOKE_HOME: home },
  });
  await a.exited;

  const keys = mkdtempSync(join(tmpdir(), 'yoke-keys-'));
  const b = await startCheckout({ YOKE_SSH_KEY_DIR: keys });
  for (const name of ['worker', 'dashboard']) pidOf(b, name);
  await untilTrue(async () => b.stdout().includes('Stop:'), 'the start message');
  expect(b.stdout()).toContain(`mkdir -p ${keys} && ssh-keygen -q -t ed25519 -N '' -f ${keys}/lab-1`);
  await promisify(execFile)('bash', ['scripts/stop.sh'], { cwd: b.dir, env: { PATH: process.env.PATH } });
  await b.exited;
}, 60_000);
