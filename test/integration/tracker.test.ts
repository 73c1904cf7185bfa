import { createServer, type IncomingMessage, type Server } from 'node:http';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { releaseDefinition, writeDefinition } from '../helpers/runs';

/**
 * S3 GitHub tracker sync against a local HTTP server standing in for the GitHub REST API: it
 * checks every request (method, path, token, body) and keeps the issue's state.
 */
interface Seen {
  method: string;
  path: string;
  auth: string | undefined;
  body: unknown;
}

let t: TestDatabase;
let r: DeploymentRunActivities;
let server: Server;
let seen: Seen[];
let problems: string[];
let failPatches: number;
let state: 'open' | 'closed';

async function body(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : null;
}

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const s: Seen = { method: req.method!, path: req.url!, auth: req.headers.authorization, body: await body(req) };
    seen.push(s);
    if (s.auth !== 'token gh-test-token') problems.push(`bad auth ${s.auth}`);
    if (s.path !== '/repos/acme/shop/issues/42') {
      problems.push(`unexpected path ${s.path}`);
      return res.writeHead(404).end('{}');
    }
    if (s.method === 'GET')
      return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ number: 42, state }));
    if (s.method === 'PATCH') {
      const b = s.body as { state?: string; state_reason?: string };
      if (b?.state !== 'closed' || b?.state_reason !== 'completed') problems.push(`bad body ${JSON.stringify(b)}`);
      if (failPatches > 0) {
        failPatches--;
        // the first failure says why, the second says nothing (an empty body, as proxies answer)
        return res
          .writeHead(502, { 'content-type': 'application/json' })
          .end(failPatches === 1 ? '{"message":"bad gateway"}' : '{}');
      }
      state = 'closed';
      return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ number: 42, state }));
    }
    problems.push(`unexpected method ${s.method}`);
    res.writeHead(405).end('{}');
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
});
afterAll(async () => {
  await new Promise((ok) => server.close(ok));
});

beforeEach(async () => {
  seen = [];
  problems = [];
  failPatches = 0;
  state = 'open';
  process.env.YOKE_TEST_GH_TOKEN = 'gh-test-token';
  t = await createTestDatabase();
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
  const port = (server.address() as { port: number }).port;
  const d = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: 'http://stage.example.test',
    prodUrl: 'https://web.example.test',
  });
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition({
      ...d,
      tracker: {
        github: { owner: 'acme', repo: 'shop', api_url: `http://127.0.0.1:${port}`, token_env: 'YOKE_TEST_GH_TOKEN' },
      },
      items: d.items.map((i) => (i.id === 'WEB-2' ? { ...i, issue: 42 } : i)),
    }),
  });
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'd1' });
});
afterEach(async () => {
  await t.drop();
});

async function walked(): Promise<string> {
  const run = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'a1b2c3d4',
    idempotencyKey: 'k',
    items: ['WEB-2'],
  });
  await r.executeRun({ sessionId: 'd1', runId: run.run_id });
  for (const stage of (await r.loadRunPlan({ runId: run.run_id })).stages) {
    await r.beginStage({ runId: run.run_id, ordinal: stage.ordinal, walk: 1 });
    await r.finishStage({ runId: run.run_id, ordinal: stage.ordinal, walk: 1, result: { ok: true, detail: 'test' } });
  }
  for (const checkName of ['smoke-test', 'WEB-2/gift-smoke'])
    await r.recordQaVerdict({ sessionId: 'd1', runId: run.run_id, checkName, status: 'passed' });
  return run.run_id;
}

test("S3 the GitHub tracker closes a delivered item's issue once, through the REST API, even after two failed attempts", async () => {
  const runId = await walked();
  failPatches = 2;
  const first = await r.settleNow({ runId });
  expect(first.status).toBe('executing');
  // S3: the stored error names the HTTP status and the request, whatever the body said
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/repos/acme/shop/issues/42`;
  expect(first.effects.failed[0]!.error).toBe(`GitHub answered HTTP 502 to PATCH ${url}: bad gateway`);
  const second = await r.settleNow({ runId });
  expect(second.status).toBe('executing');
  expect(second.effects.failed[0]!.error).toBe(`GitHub answered HTTP 502 to PATCH ${url} (no message)`);
  // while it fails, get names the replay as the next step
  expect((await r.getRun({ runId })).recovery).toBe(
    `fix the cause and replay: yoke deployment-runs update ${runId} status succeeded`,
  );
  const third = await r.settleNow({ runId });
  expect(third.status).toBe('succeeded');
  expect(third.effects.applied).toEqual([
    { item: 'WEB-2', effect: 'tracker_sync', outcome: `closed (WEB-2 delivered by ${runId} at a1b2c3d4)` },
  ]);
  expect(problems).toEqual([]);
  expect(seen.map((s) => s.method)).toEqual(['GET', 'PATCH', 'GET', 'PATCH', 'GET', 'PATCH']);
  expect(state).toBe('closed');
  // a replay of a succeeded run sends nothing
  await r.updateRunStatus({ sessionId: 'd1', runId, field: 'status', value: 'succeeded' });
  expect(seen).toHaveLength(6);
});

test('S3 a sync lost after GitHub applied it is not applied again: the replay finds the issue closed', async () => {
  const runId = await walked();
  state = 'closed'; // as if an earlier attempt's PATCH landed but its ledger row did not
  const settled = await r.settleNow({ runId });
  expect(settled.status).toBe('succeeded');
  expect(settled.effects.applied[0]).toMatchObject({ effect: 'tracker_sync', outcome: 'already closed' });
  expect(seen.map((s) => s.method)).toEqual(['GET']);
  expect(problems).toEqual([]);
});
