import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Kysely } from 'kysely';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { sessionActivities } from '../../activities/sessions';
import { yoke } from './cli';
import { createTestDatabase, type TestDatabase } from './db';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import type { Database } from '../../db/database';

/**
 * `yoke deployment-runs create` of project web's release flow to stage (what releaseDefinition
 * declares) for a candidate under an idempotency key, with its member items.
 */
export function releaseRunArgs(candidate: string, key: string, items: string[] = []): string[] {
  return [
    'deployment-runs',
    'create',
    '--project',
    'web',
    '--flow',
    'release',
    '--target',
    'stage',
    '--candidate',
    candidate,
    '--idempotency-key',
    key,
    ...items.flatMap((i) => ['--item', i]),
  ];
}

/** A real HTTP deployment target on loopback: records every deploy, can be told to fail or to be slow. */
export interface HttpTarget {
  url: string;
  deploys: string[];
  status: number;
  /** What GET /revision answers (Q2): the last deployed sha unless set. */
  revision?: string;
  /** Answers a deploy only after this long (a slow target, so a fault lands mid-request). */
  delayMs: number;
  /** Deploy requests received so far, answered or not. */
  received: number;
  /** Deploy requests whose caller hung up before the answer. */
  abandoned: number;
  close(): Promise<void>;
}

export async function startHttpTarget(): Promise<HttpTarget> {
  const target: HttpTarget = {
    url: '',
    deploys: [],
    status: 200,
    delayMs: 0,
    received: 0,
    abandoned: 0,
    close: async () => undefined,
  };
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    if (url.pathname === '/deploy') {
      target.received++;
      const answer = () => {
        if (target.status === 200) target.deploys.push(url.searchParams.get('sha') ?? '');
        res.writeHead(target.status).end(target.status === 200 ? 'deployed' : 'boom');
      };
      if (!target.delayMs) return answer();
      const timer = setTimeout(answer, target.delayMs);
      res.on('close', () => {
        if (!res.writableFinished) {
          clearTimeout(timer);
          target.abandoned++;
        }
      });
    } else if (url.pathname === '/revision' && (target.revision ?? target.deploys.at(-1))) {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ commit: target.revision ?? target.deploys.at(-1) }));
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  target.url = `http://127.0.0.1:${port}`;
  target.close = () =>
    new Promise((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return target;
}

/** Writes a project definition to a fresh folder and returns the file's path. */
export function writeDefinition(definition: object, name = 'project.yaml'): string {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-def-'));
  const file = join(dir, name);
  writeFileSync(file, stringify(definition));
  return file;
}

/** The usual shape for tests: deploy to stage, run-level QA on stage, approval, deploy production. */
export function releaseDefinition(opts: {
  project: string;
  prefix: string;
  stageUrl: string;
  prodUrl: string;
  extraStages?: object[];
}) {
  const deploy = (url: string) => ({
    http: { method: 'POST', url: `${url}/deploy?sha={{candidate}}`, expect_status: 200 },
  });
  return {
    project: opts.project,
    item_prefix: opts.prefix,
    environments: [
      { name: 'stage', url: opts.stageUrl, tier: 'stage' },
      { name: 'production', url: opts.prodUrl, tier: 'production' },
      { name: 'preview-a', preview_slug: 'pr-a', tier: 'preview' },
      { name: 'preview-b', preview_slug: 'pr-b', tier: 'preview' },
    ],
    flows: [
      {
        name: 'release',
        delivery_custody: true,
        completion_flow: true,
        stages: [
          { name: 'deploy-stage', kind: 'deploy', target: 'stage', action: deploy(opts.stageUrl) },
          { name: 'stage-qa', kind: 'qa', target: 'stage', scope: 'run', checks: [{ name: 'smoke-test' }] },
          { name: 'signoff', kind: 'approval', target: 'production' },
          { name: 'deploy-production', kind: 'deploy', target: 'production', action: deploy(opts.prodUrl) },
          ...(opts.extraStages ?? []),
        ],
      },
      {
        name: 'hotfix',
        stages: [{ name: 'deploy-stage', kind: 'deploy', target: 'stage', action: deploy(opts.stageUrl) }],
      },
      { name: 'preview-a', stages: [{ name: 'go', kind: 'auto', target: 'preview-a' }] },
      { name: 'preview-b', stages: [{ name: 'go', kind: 'auto', target: 'preview-b' }] },
    ],
    plans: [{ id: 'PLAN-7', cases: [{ name: 'look', manual: { instructions: 'look at it' } }] }],
    items: [
      {
        id: `${opts.prefix}-1`,
        title: 'Checkout',
        obligations: [
          { case: 'checkout-e2e', qa_phase: 'post_deploy', target_env: 'stage' },
          // No QA stage of these flows targets production: a blocking canary would hold settlement (S6).
          { case: 'prod-canary', qa_phase: 'post_deploy', target_env: 'production', blocking: false },
          { case: 'unit', qa_phase: 'pre_merge' },
          { case: 'planned', qa_phase: 'post_deploy', target_env: 'stage', plan_id: 'PLAN-7' },
          { case: 'waived-one', qa_phase: 'post_deploy', target_env: 'stage', waived: true },
        ],
      },
      {
        id: `${opts.prefix}-2`,
        title: 'Gift cards',
        obligations: [{ case: 'gift-smoke', qa_phase: 'post_deploy', target_env: 'stage' }],
      },
      { id: `${opts.prefix}-3`, title: 'Docs' },
    ],
  };
}

/**
 * Release runs of project web driven by session d1, each created under its own idempotency
 * key: `createdRun`, and `waitingRun` executed with its stage deploy passed and now waiting at
 * its QA stage (stage-qa), a run a takeover may move.
 */
export function releaseRuns(runs: () => DeploymentRunActivities) {
  let keys = 0;
  async function createdRun(candidate: string, items: string[] = []): Promise<string> {
    const run = await runs().createRun({
      sessionId: 'd1',
      project: 'web',
      flow: 'release',
      target: 'stage',
      candidate,
      idempotencyKey: `k${++keys}`,
      items,
    });
    return run.run_id;
  }
  async function waitingRun(candidate: string, items: string[] = []): Promise<string> {
    const r = runs();
    const runId = await createdRun(candidate, items);
    await r.executeRun({ sessionId: 'd1', runId });
    await r.beginStage({ runId, ordinal: 0, walk: 1 });
    await r.finishStage({ runId, ordinal: 0, walk: 1, result: { ok: true, detail: 'deployed' } });
    await r.beginStage({ runId, ordinal: 1, walk: 1 });
    return runId;
  }
  return { createdRun, waitingRun };
}

/** Applies project web's release definition (stage and production at example.test addresses). */
export async function applyWebRelease(db: Kysely<Database>): Promise<void> {
  const def = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: 'http://stage.example.test',
    prodUrl: 'https://web.example.test',
  });
  await projectDefinitionActivities({ db }).applyProjectDefinition({ file: writeDefinition(def) });
}

/** A run created and executed by a session, then walked through all its stages, each passing. */
export async function walkedRun(
  r: DeploymentRunActivities,
  input: Parameters<DeploymentRunActivities['createRun']>[0] & { sessionId: string },
): Promise<string> {
  const run = await r.createRun(input);
  await r.executeRun({ sessionId: input.sessionId, runId: run.run_id });
  const plan = await r.loadRunPlan({ runId: run.run_id });
  for (const stage of plan.stages) {
    await r.beginStage({ runId: run.run_id, ordinal: stage.ordinal, walk: 1 });
    await r.finishStage({ runId: run.run_id, ordinal: stage.ordinal, walk: 1, result: { ok: true, detail: 'test' } });
  }
  return run.run_id;
}

/**
 * A CLI test file on project web's release definition: its own database, the definition applied,
 * `sessions` registered (actor driver), dropped after the file. `run` is `yoke` acting as a session
 * (default d1) against the test Temporal server (it answers; no worker polls).
 */
export function webReleaseCliFile(sessions: string[] = ['d1']) {
  let t: TestDatabase;
  const db = () => t.db;
  const run = (args: string[], session = 'd1') =>
    yoke(t.url, args, { YOKE_SESSION_ID: session, TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS! });
  const runs = () => deploymentRunActivities({ db: t.db });
  beforeAll(async () => {
    t = await createTestDatabase();
    await applyWebRelease(t.db);
    for (const sessionId of sessions)
      await sessionActivities({ db: t.db }).registerSession({ sessionId, actorId: 'driver', project: 'web' });
  }, 60_000);
  afterAll(async () => {
    await t.drop();
  });
  return { db, run, runs, ...releaseRuns(runs) };
}
