import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { sql } from 'kysely';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import {
  foldRequested,
  qaSettled,
  runState,
  runWorkflowId,
  usageWorkflowId,
  type RunSnapshot,
} from '../../workflows/definitions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { until as pollUntil } from '../helpers/until';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget, releaseRunArgs } from '../helpers/runs';
import { startSshHost } from '../helpers/sshd';
import {
  startFaultTemporal,
  startTcpProxy,
  startWorkerProcess,
  type DevServer,
  type TcpProxy,
  type WorkerProcess,
} from './services';

/**
 * The fault suite: the real stack (Postgres, a Temporal dev server on a SQLite file, yoke
 * workers as processes, HTTP deploy targets, the built CLI) and real faults. Every run must
 * end in a recorded state or carry on; `yoke doctor` is clean at the end.
 */

let t: TestDatabase;
let temporal: DevServer;
let proxy: TcpProxy;
let worker: WorkerProcess | undefined;
let client: Client;
let connection: Connection;
let r: DeploymentRunActivities;
let stage: HttpTarget;
let prod: HttpTarget;
let definitionFile: string;
const taskQueue = `faults-${randomInt(1e9)}`;
const table: { fault: string; outcome: string; recovered_s: string }[] = [];

function workerEnv(): NodeJS.ProcessEnv {
  const db = new URL(t.url);
  db.host = `127.0.0.1:${proxy.port}`; // the worker reaches Postgres only through the proxy
  return {
    DATABASE_URL: db.toString(),
    TEMPORAL_ADDRESS: temporal.address,
    YOKE_TASK_QUEUE: taskQueue,
    YOKE_SWEEP_INTERVAL_SECONDS: '3600',
    YOKE_HOME: join(__dirname, '..', '..', '.yoke', 'faults'),
  };
}

function cliEnv(): NodeJS.ProcessEnv {
  return {
    DATABASE_URL: t.url,
    TEMPORAL_ADDRESS: temporal.address,
    YOKE_TASK_QUEUE: taskQueue,
    YOKE_SESSION_ID: 'd1',
    YOKE_HOME: join(__dirname, '..', '..', '.yoke', 'faults'),
  };
}

function yoke(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      join(__dirname, '..', '..', 'bin', 'yoke'),
      args,
      { env: { ...process.env, ...cliEnv() }, timeout: 120_000 },
      (err, stdout, stderr) =>
        resolve({
          code: err ? ((err as { code?: number }).code ?? 1) : 0,
          stdout: String(stdout),
          stderr: String(stderr),
        }),
    );
  });
}

/**
 * The shared `until`, for a world where services die on purpose: a read that throws is asked
 * again, and a worker that died fails the wait at once with its output.
 */
async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, seconds = 240): Promise<T> {
  const found = await pollUntil(
    async () => {
      const died = worker?.died();
      if (died) throw new Error(`while waiting for ${what}: ${died}`);
      return read().catch(() => undefined);
    },
    (v) => v !== undefined && ok(v),
    `${what} (worker output: ${worker?.logFile})`,
    { timeoutMs: seconds * 1000, everyMs: 250 },
  );
  return found as T;
}

const since = (start: number) => ((Date.now() - start) / 1000).toFixed(1);
const stageStatus = async (runId: string, name: string) =>
  (await r.getRun({ runId })).stages!.find((s) => s.name === name)!.status;
const snapshot = (runId: string) =>
  client.workflow.getHandle(runWorkflowId(runId)).query(runState) as Promise<RunSnapshot>;

let keys = 0;
async function newRun(): Promise<string> {
  keys++;
  const created = await yoke([
    ...releaseRunArgs(`fa17${String(keys).padStart(12, '0')}`, `fault-${keys}`, ['WEB-1']),
    '--json',
  ]);
  expect(created.code).toBe(0);
  const runId = JSON.parse(created.stdout).run_id as string;
  expect((await yoke(['deployment-runs', 'execute', runId, '--json'])).code).toBe(0);
  return runId;
}

async function passQa(runId: string) {
  for (const check of ['smoke-test', 'WEB-1/checkout-e2e'])
    expect((await yoke(['deployment-runs', 'qa-verdict', runId, '--check', check, '--status', 'passed'])).code).toBe(0);
}

beforeAll(async () => {
  t = await createTestDatabase();
  // Workflow ids are run ids: keep this database's apart from any other on a shared server.
  await sql`SELECT setval('deployment_run_numbers', ${randomInt(1_000_000, 1_000_000_000)})`.execute(t.db);
  const pg = new URL(t.url);
  [temporal, proxy, stage, prod] = await Promise.all([
    startFaultTemporal(),
    startTcpProxy({ host: pg.hostname, port: Number(pg.port || 5432) }),
    startHttpTarget(),
    startHttpTarget(),
  ]);
  connection = await Connection.connect({ address: temporal.address });
  client = new Client({ connection });
  definitionFile = writeDefinition(
    releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url }),
  );
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: definitionFile });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'driver' });
  r = deploymentRunActivities({ db: t.db });
  worker = await startWorkerProcess(workerEnv());
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  await connection?.close();
  await temporal?.stop();
  await proxy?.stop();
  await Promise.all([stage?.close(), prod?.close()]);
  await t?.drop();
  if (table.length) {
    const widths = [36, 52, 10];
    const row = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ');
    process.stdout.write(
      `\n${row(['fault', 'outcome', 'recover s'])}\n${widths.map((w) => '-'.repeat(w)).join('-|-')}\n${table
        .map((x) => row([x.fault, x.outcome, x.recovered_s]))
        .join('\n')}\n\n`,
    );
  }
});

test('kill -9 of the worker mid-deploy (slow target): the stage and the run fail cleanly naming the lost worker; retry completes the deploy', async () => {
  stage.delayMs = 120_000;
  const before = stage.received;
  const runId = await newRun();
  await until(
    'the deploy to reach the slow target',
    async () => stage.received,
    (n) => n > before,
  );
  const killed = Date.now();
  await worker!.kill9();
  worker = await startWorkerProcess(workerEnv());
  const failed = await until(
    'the run to be recorded failed',
    () => r.getRun({ runId }),
    (v) => v.status === 'failed',
  );
  expect(failed.terminal_reason).toContain('worker_lost');
  expect(failed.stages![0]).toMatchObject({ status: 'failed', detail: expect.stringContaining('worker_lost') });
  expect(failed.occupancy!.occupying).toBe(false);
  expect(failed.qa!.filter((q) => q.status === 'pending').every((q) => q.retracted === 'automatic')).toBe(true);
  table.push({
    fault: 'kill -9 worker mid-deploy',
    outcome: 'stage+run failed: worker_lost, origins released',
    recovered_s: since(killed),
  });

  stage.delayMs = 0;
  const retried = Date.now();
  expect((await yoke(['deployment-runs', 'retry', runId, '--json'])).code).toBe(0);
  await until(
    'the retried run to wait at QA',
    () => stageStatus(runId, 'stage-qa'),
    (s) => s === 'waiting',
  );
  table.push({
    fault: '  then: yoke deployment-runs retry',
    outcome: 'deploy ran again, run waits at QA',
    recovered_s: since(retried),
  });

  // kill -9 in the QA wait: the verdicts land while no worker runs
  const killedInQa = Date.now();
  await worker!.kill9();
  await passQa(runId);
  worker = await startWorkerProcess(workerEnv());
  await until(
    'the run to reach approval',
    () => stageStatus(runId, 'signoff'),
    (s) => s === 'waiting',
  );
  table.push({
    fault: 'kill -9 worker in the QA wait',
    outcome: 'verdicts kept; run moved on to approval',
    recovered_s: since(killedInQa),
  });

  const killedInApproval = Date.now();
  await worker!.kill9();
  expect((await yoke(['deployment-runs', 'approve', runId, '--stage', 'signoff'])).code).toBe(0);
  worker = await startWorkerProcess(workerEnv());
  await until(
    'the run to succeed',
    () => r.getRun({ runId }),
    (v) => v.status === 'succeeded',
  );
  expect(prod.deploys).toContain(`fa17${String(1).padStart(12, '0')}`);
  table.push({
    fault: 'kill -9 worker in the approval wait',
    outcome: 'approval kept; run succeeded',
    recovered_s: since(killedInApproval),
  });
}, 600_000);

test('a Temporal dev server restart (SQLite kept) mid-run: the run carries on', async () => {
  const runId = await newRun();
  await until(
    'the run to wait at QA',
    () => stageStatus(runId, 'stage-qa'),
    (s) => s === 'waiting',
  );
  const restarted = Date.now();
  await temporal.restart();
  await passQa(runId);
  await until(
    'the run to reach approval',
    () => stageStatus(runId, 'signoff'),
    (s) => s === 'waiting',
  );
  table.push({
    fault: 'Temporal dev server restart',
    outcome: 'workflow kept; run moved on to approval',
    recovered_s: since(restarted),
  });
  expect((await yoke(['deployment-runs', 'approve', runId, '--stage', 'signoff'])).code).toBe(0);
  await until(
    'the run to succeed',
    () => r.getRun({ runId }),
    (v) => v.status === 'succeeded',
  );
}, 600_000);

test('Postgres refuses the worker for 10 s mid-run: the steps wait and retry; nothing is lost', async () => {
  const runId = await newRun();
  await until(
    'the run to wait at QA',
    () => stageStatus(runId, 'stage-qa'),
    (s) => s === 'waiting',
  );
  const cut = Date.now();
  await proxy.stop();
  await passQa(runId); // recorded (the CLI reaches Postgres directly) and signalled: the worker's read fails
  await until(
    'the workflow to show its failing read',
    async () => (await client.workflow.getHandle(runWorkflowId(runId)).describe()).raw.pendingActivities ?? [],
    (p) => p.some((a) => (a.attempt ?? 0) > 1),
    60,
  );
  await new Promise((x) => setTimeout(x, Math.max(0, 10_000 - (Date.now() - cut))));
  await proxy.start();
  const back = Date.now();
  await until(
    'the run to reach approval',
    () => stageStatus(runId, 'signoff'),
    (s) => s === 'waiting',
  );
  table.push({
    fault: 'Postgres refused for 10 s',
    outcome: 'reads retried with backoff; run moved on',
    recovered_s: since(back),
  });
  expect((await yoke(['deployment-runs', 'approve', runId, '--stage', 'signoff'])).code).toBe(0);
  await until(
    'the run to succeed',
    () => r.getRun({ runId }),
    (v) => v.status === 'succeeded',
  );
}, 600_000);

test('apply mid-run (a deploy URL, an inserted and a removed stage): the run executes what it froze', async () => {
  const runId = await newRun();
  await until(
    'the run to wait at QA',
    () => stageStatus(runId, 'stage-qa'),
    (s) => s === 'waiting',
  );
  const moved = await startHttpTarget();
  try {
    const changed = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: moved.url });
    const release = changed.flows[0]!;
    release.stages.splice(2, 1, {
      name: 'inserted-qa',
      kind: 'qa',
      target: 'production',
      scope: 'run',
      checks: [{ name: 'x' }],
    } as never);
    const applied = Date.now();
    expect((await yoke(['apply', '-f', writeDefinition(changed), '--json'])).code).toBe(0);
    await passQa(runId);
    await until(
      'the run to reach its frozen approval',
      () => stageStatus(runId, 'signoff'),
      (s) => s === 'waiting',
    );
    expect((await yoke(['deployment-runs', 'approve', runId, '--stage', 'signoff'])).code).toBe(0);
    await until(
      'the run to succeed',
      () => r.getRun({ runId }),
      (v) => v.status === 'succeeded',
    );
    expect(moved.received).toBe(0);
    expect(prod.deploys).toContain((await r.getRun({ runId })).candidate_sha);
    table.push({
      fault: 'apply mid-run (URL, +stage, -stage)',
      outcome: 'run walked its pinned flow',
      recovered_s: since(applied),
    });
  } finally {
    await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: definitionFile });
    await moved.close();
  }
}, 600_000);

test('10,000 wake-ups of a QA wait: the workflow continues as new and stays alive, then finishes', async () => {
  const runId = await newRun();
  await until(
    'the run to wait at QA',
    () => stageStatus(runId, 'stage-qa'),
    (s) => s === 'waiting',
  );
  const handle = client.workflow.getHandle(runWorkflowId(runId));
  const firstRun = (await handle.describe()).runId;
  const started = Date.now();
  // In batches, each followed by a query: a query waits for the workflow task in flight, so the
  // signals come as fast as the workflow takes them (a storm faster than that only measures
  // the test machine), and every one of them is a wake-up in the history.
  for (let sent = 0; sent < 10_000; sent += 500) {
    await Promise.all(Array.from({ length: 500 }, () => handle.signal(qaSettled)));
    await handle.query(runState);
  }
  const latest = await until(
    'the wait to continue as new',
    () => handle.describe(),
    (d) => d.runId !== firstRun, // it continued as new at least once
    120,
  );
  expect(latest.status.name).toBe('RUNNING');
  expect(latest.historyLength).toBeLessThan(20_000);
  // the new run walks back to its wait (plan, begin the stage) before it reports it
  await until(
    'the new run to wait at QA',
    async () => (await snapshot(runId)).waitingFor,
    (w) => w === 'qa',
    60,
  );
  await passQa(runId);
  await until(
    'the run to reach approval',
    () => stageStatus(runId, 'signoff'),
    (s) => s === 'waiting',
  );
  expect((await yoke(['deployment-runs', 'approve', runId, '--stage', 'signoff'])).code).toBe(0);
  await until(
    'the run to succeed',
    () => r.getRun({ runId }),
    (v) => v.status === 'succeeded',
  );
  table.push({
    fault: '10,000 wake-ups of one wait',
    outcome: 'continued as new; still alive; succeeded',
    recovered_s: since(started),
  });
}, 900_000);

test('kill -9 of the worker during verify: the CLI says check_interrupted (exit 3), not internal_error; the machine is released', async () => {
  const lab = await startSshHost('faultlab');
  try {
    const added = await yoke([
      'test-machine',
      'add',
      'faultlab',
      '--host',
      lab.host,
      '--port',
      String(lab.port),
      '--user',
      lab.user,
      '--credential',
      lab.credential,
      '--host-key-file',
      lab.hostKeyFile,
      '--verify-command',
      `touch ${lab.dir}/started && sleep 120`,
    ]);
    expect(added.code).toBe(0);
    const verifying = yoke(['test-machine', 'verify', 'faultlab', '--json']);
    await until(
      'the check to run on the host',
      async () => existsSync(join(lab.dir, 'started')),
      (v) => v,
    );
    const killed = Date.now();
    await worker!.kill9();
    worker = await startWorkerProcess(workerEnv());
    const r = await verifying;
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('check_interrupted');
    expect(r.stderr).not.toContain('internal_error');
    const [machine] = JSON.parse((await yoke(['test-machine', 'list', '--json'])).stdout) as { holder: unknown }[];
    expect(machine!.holder).toBeNull();
    table.push({
      fault: 'kill -9 worker during verify',
      outcome: 'CLI: check_interrupted (exit 3); machine released',
      recovered_s: since(killed),
    });
  } finally {
    await lab.stop();
  }
}, 300_000);

test('a fold handed a FIFO or /dev/zero: the CLI refuses it (exit 2); the worker refuses it without a connection idle in transaction, keeps running runs and stops on SIGTERM', async () => {
  const fifo = join(mkdtempSync(join(tmpdir(), 'yoke-fault-fifo-')), 'transcript.jsonl');
  execFileSync('mkfifo', [fifo]);
  const cli = await yoke(['hooks', 'usage', '--session', 'd1', '--harness', 'claude', '--artifact', fifo, '--async']);
  expect(cli.code).toBe(2);
  expect(cli.stderr).toContain('artifact_not_regular_file');
  // Past the CLI's check, straight to the worker: what an older CLI or a swapped path would
  // record (as an admin, so the request's session need not be the caller's).
  const handed = Date.now();
  for (const artifact of [fifo, '/dev/zero']) {
    await sql`INSERT INTO session_usage_fold_requests (session_id, harness, artifacts)
              VALUES ('d1', 'claude', ${[artifact]})`.execute(t.db);
    await client.workflow.signalWithStart('sessionUsage', {
      workflowId: usageWorkflowId('d1'),
      taskQueue,
      args: [{ sessionId: 'd1' }],
      signal: foldRequested,
      signalArgs: [],
    });
  }
  const idleInTransaction = async () =>
    (
      await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                               WHERE datname = current_database() AND state = 'idle in transaction'`.execute(t.db)
    ).rows[0]!.n;
  await until(
    'both folds to be refused',
    async () =>
      (
        await sql<{ n: number }>`SELECT count(*)::int AS n FROM session_usage_fold_requests
                                 WHERE session_id = 'd1' AND outcome->>'refused' IS NOT NULL`.execute(t.db)
      ).rows[0]!.n,
    (n) => n >= 2,
    60,
  );
  expect(await idleInTransaction()).toBe(0);
  const runId = await newRun(); // activities of every other kind still get connections
  await until(
    'the run to wait at QA',
    () => stageStatus(runId, 'stage-qa'),
    (s) => s === 'waiting',
  );
  expect(await idleInTransaction()).toBe(0);
  table.push({
    fault: 'fold of a FIFO and /dev/zero',
    outcome: 'refused (exit 2 / named); no idle txn; runs go on',
    recovered_s: since(handed),
  });
  const stopping = Date.now();
  await worker!.stop();
  expect(Date.now() - stopping).toBeLessThan(35_000);
  table.push({ fault: 'SIGTERM to the worker', outcome: 'exited gracefully', recovered_s: since(stopping) });
  worker = await startWorkerProcess(workerEnv());
  await passQa(runId);
  await until(
    'the run to reach approval',
    () => stageStatus(runId, 'signoff'),
    (s) => s === 'waiting',
  );
  expect((await yoke(['deployment-runs', 'approve', runId, '--stage', 'signoff'])).code).toBe(0);
  await until(
    'the run to succeed',
    () => r.getRun({ runId }),
    (v) => v.status === 'succeeded',
  );
}, 300_000);

test('a run executed with no workflow (the CLI died after its commit) is started by the reconciler; yoke doctor ends clean', async () => {
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'hotfix',
    target: 'stage',
    candidate: 'feed00000000beef',
    idempotencyKey: 'no-workflow',
    items: [],
  });
  await r.executeRun({ sessionId: 'd1', runId: created.run_id });
  const doctor = await yoke(['doctor', '--json']);
  expect(doctor.code).toBe(1);
  expect(doctor.stdout).toContain('executing_run_has_live_workflow');
  const repaired = Date.now();
  const repair = await yoke(['deployment-runs', 'repair', created.run_id, '--json']);
  expect(repair.code).toBe(0);
  expect(JSON.parse(repair.stdout)).toMatchObject({ workflow: 'started' });
  await until(
    'the repaired run to succeed',
    () => r.getRun({ runId: created.run_id }),
    (v) => v.status === 'succeeded',
  );
  table.push({
    fault: 'execute commit with no workflow',
    outcome: 'repair started it; run succeeded',
    recovered_s: since(repaired),
  });

  const clean = await yoke(['doctor', '--json']);
  expect(clean.stderr).toBe('');
  expect(clean.code).toBe(0);
  expect(JSON.parse(clean.stdout)).toMatchObject({ ok: true, violations: [] });
  table.push({ fault: 'yoke doctor', outcome: 'clean: every invariant holds', recovered_s: '-' });
}, 300_000);
