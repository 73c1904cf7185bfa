import { createServer, type IncomingMessage, type Server } from 'node:http';
import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import { Client as TemporalClient, Connection } from '@temporalio/client';
import { sql } from 'kysely';
import { Client as PgClient } from 'pg';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { runWorkflowId } from '../../workflows/definitions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { writeDefinition } from '../helpers/runs';
import { pollUntil, startFaultTemporal, startWorkerProcess, type DevServer, type WorkerProcess } from './services';

/**
 * Settlement under kill -9 (S2, S3): the worker process dies once inside the commit phase and
 * once inside the effects phase; a restarted worker finishes the run. Every member is closed
 * once (one ItemDone each) and every effect applied once: the local GitHub stand-in counts the
 * requests it received and closes each issue exactly once.
 */

let t: TestDatabase;
let temporal: DevServer;
let worker: WorkerProcess | undefined;
let connection: Connection;
let client: TemporalClient;
let r: DeploymentRunActivities;
let tracker: Server;
const taskQueue = `settlement-faults-${randomInt(1e9)}`;
const ISSUES = [41, 42, 43];
const MEMBERS = ['WEB-1', 'WEB-2', 'WEB-3'];

/** What the GitHub stand-in saw: every request, and how often each issue went from open to closed. */
const requests: { method: string; issue: number }[] = [];
const closings = new Map<number, number>();
const state = new Map<number, 'open' | 'closed'>(ISSUES.map((i) => [i, 'open']));
/** While set, a PATCH is applied but never answered: the worker dies waiting for the answer. */
let holdPatches = false;

async function body(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : null;
}

function workerEnv(): NodeJS.ProcessEnv {
  return {
    DATABASE_URL: t.url,
    TEMPORAL_ADDRESS: temporal.address,
    YOKE_TASK_QUEUE: taskQueue,
    YOKE_SWEEP_INTERVAL_SECONDS: '3600',
    YOKE_HOME: join(__dirname, '..', '..', '.yoke', 'faults'),
    YOKE_TEST_GH_TOKEN: 'gh-fault-token',
  };
}

beforeAll(async () => {
  tracker = createServer(async (req, res) => {
    const issue = Number(/\/repos\/acme\/shop\/issues\/(\d+)$/.exec(req.url ?? '')?.[1]);
    const b = (await body(req)) as { state?: string } | null;
    requests.push({ method: req.method!, issue });
    const json = (code: number, v: object) =>
      res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify(v));
    if (!state.has(issue) || req.headers.authorization !== 'token gh-fault-token') return json(404, {});
    if (req.method === 'GET') return json(200, { number: issue, state: state.get(issue) });
    if (req.method === 'PATCH' && b?.state === 'closed') {
      if (state.get(issue) === 'open') closings.set(issue, (closings.get(issue) ?? 0) + 1);
      state.set(issue, 'closed');
      if (holdPatches) return; // applied on "GitHub", the answer never comes
      return json(200, { number: issue, state: 'closed' });
    }
    return json(405, {});
  });
  await new Promise<void>((ok) => tracker.listen(0, '127.0.0.1', ok));
  t = await createTestDatabase();
  await sql`SELECT setval('deployment_run_numbers', ${randomInt(1_000_000, 1_000_000_000)})`.execute(t.db);
  temporal = await startFaultTemporal();
  connection = await Connection.connect({ address: temporal.address });
  client = new TemporalClient({ connection });
  const port = (tracker.address() as { port: number }).port;
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition({
      project: 'web',
      item_prefix: 'WEB',
      tracker: {
        github: { owner: 'acme', repo: 'shop', api_url: `http://127.0.0.1:${port}`, token_env: 'YOKE_TEST_GH_TOKEN' },
      },
      environments: [{ name: 'stage', url: 'http://stage.settlement-faults.test', tier: 'stage' }],
      flows: [
        {
          name: 'ship',
          delivery_custody: true,
          completion_flow: true,
          stages: [{ name: 'go', kind: 'auto', target: 'stage' }],
        },
      ],
      items: MEMBERS.map((id, i) => ({ id, issue: ISSUES[i] })),
    }),
  });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'driver' });
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 3_600_000 });
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  await connection?.close();
  await temporal?.stop();
  await t?.drop();
  await new Promise((ok) => tracker?.close(ok));
});

test('kill -9 of the worker in the commit phase and again in the effects phase: the restarted worker settles the run, every member closed once, every effect applied once', async () => {
  const itemIds = (await t.db.selectFrom('backlog_items').select('item_id').orderBy('item_id').execute()).map(
    (i) => i.item_id,
  );
  worker = await startWorkerProcess(workerEnv());
  const run = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'ship',
    target: 'stage',
    candidate: 'fa1150000001',
    idempotencyKey: 'settle-faults',
    items: MEMBERS,
  });
  const runId = run.run_id;
  await r.executeRun({ sessionId: 'd1', runId });
  // Hold a member's row: the commit phase blocks on it inside the worker's settlement step.
  const blocker = new PgClient({ connectionString: t.url });
  await blocker.connect();
  await blocker.query('BEGIN');
  await blocker.query('SELECT 1 FROM backlog_items WHERE item_id = $1 FOR UPDATE', [itemIds[2]]);
  await client.workflow.start('deploymentRun', {
    workflowId: runWorkflowId(runId),
    taskQueue,
    args: [{ runId }],
  });

  // 1. The commit phase is waiting on the held row: kill the worker there.
  const stuck = await pollUntil(
    'the commit phase to wait on the held member',
    async () =>
      (
        await sql<{ query: string }>`
          SELECT query FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`.execute(t.db)
      ).rows,
    (rows) => rows.length > 0,
  );
  expect(stuck[0]!.query).toMatch(/backlog_items/);
  expect((await r.getRun({ runId })).settling).toBe(true);
  await worker.kill9();
  await blocker.query('ROLLBACK');
  await blocker.end();
  // The killed step's connection is gone, so its transaction rolled back: nothing is closed.
  expect(
    await t.db.selectFrom('deployment_run_items').select('closed_at').where('run_id', '=', runId).execute(),
  ).toEqual(MEMBERS.map(() => ({ closed_at: null })));

  // 2. A new worker commits; the tracker stand-in applies the first close but never answers: kill again.
  holdPatches = true;
  worker = await startWorkerProcess(workerEnv());
  await pollUntil(
    'the effects phase to reach the tracker',
    async () => requests.filter((q) => q.method === 'PATCH').length,
    (n) => n > 0,
  );
  const committed = await t.db
    .selectFrom('deployment_runs')
    .select(['status', 'settlement_committed_at'])
    .where('run_id', '=', runId)
    .executeTakeFirstOrThrow();
  expect(committed).toMatchObject({ status: 'executing', settlement_committed_at: expect.any(Date) });
  await worker.kill9();
  holdPatches = false;

  // 3. A third worker finishes the effects (after the dead attempt's lease) and the run succeeds.
  worker = await startWorkerProcess(workerEnv());
  await pollUntil(
    'the run to succeed',
    () => r.getRun({ runId }),
    (v) => v.status === 'succeeded',
    600,
  );
  const done = await t.db.selectFrom('events').select('payload').where('event_type', '=', 'ItemDone').execute();
  expect(done.map((e) => e.payload.item).sort()).toEqual(MEMBERS); // each member closed once
  const items = await t.db
    .selectFrom('backlog_items')
    .select(['status', 'delivery_evidence'])
    .orderBy('item_id')
    .execute();
  for (const i of items) {
    expect(i.status).toBe('done');
    expect(i.delivery_evidence.completed_deliveries).toHaveLength(1);
  }
  const effects = await t.db
    .selectFrom('deployment_run_member_effects')
    .select(['effect', 'applied_at'])
    .where('run_id', '=', runId)
    .execute();
  expect(effects).toHaveLength(MEMBERS.length * 3);
  expect(effects.every((e) => e.applied_at !== null)).toBe(true);
  // every issue closed exactly once on "GitHub"; the lost answer was not followed by a second close
  expect(Object.fromEntries(closings)).toEqual(Object.fromEntries(ISSUES.map((i) => [i, 1])));
  for (const issue of ISSUES) expect(requests.filter((q) => q.method === 'PATCH' && q.issue === issue)).toHaveLength(1);
  process.stdout.write(
    `\nsettlement faults: tracker requests ${JSON.stringify(
      ISSUES.map((i) => ({
        issue: i,
        GET: requests.filter((q) => q.issue === i && q.method === 'GET').length,
        PATCH: requests.filter((q) => q.issue === i && q.method === 'PATCH').length,
      })),
    )}\n`,
  );
}, 900_000);
