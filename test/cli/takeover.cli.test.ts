import { RUN_STATUS_KEY, runWorkflowId } from '../../workflows/definitions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke } from '../helpers/cli';
import { createTestRepository, type TestRepository } from '../helpers/git';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget, releaseRunArgs } from '../helpers/runs';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { until } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;
let stage: HttpTarget;
let repo: TestRepository;
let env: Record<string, string>;
const run = (args: string[]) => yoke(t.url, args, env);

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  stage = await startHttpTarget();
  repo = createTestRepository();
  env = {
    TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!,
    YOKE_TASK_QUEUE: w.taskQueue,
    YOKE_SESSION_ID: 'd1',
  };
  const d = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: stage.url,
    prodUrl: 'https://web.example.test',
  });
  await setUp(run, [
    ['apply', '-f', writeDefinition({ ...d, repository: repo.dir })],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver'],
  ]);
}, 60_000);

afterAll(async () => {
  await stage.close();
  await w.shutdown();
  await t.drop();
});

const create = async (candidate: string, key: string, items: string[] = []) =>
  json(await run([...releaseRunArgs(candidate, key, items), '--json'])).run_id as string;

test('T1 T2 T3 yoke deployment-runs takeover: refusals named with their exit status, then the move and the chain; the predecessor cannot restart (run_superseded naming its successor)', async () => {
  const pred = await create(repo.A, 'pred', ['WEB-1']);
  expect((await run(['deployment-runs', 'execute', pred, '--json'])).code).toBe(0);
  await until(
    async () => json(await run(['deployment-runs', 'get', pred, 'stages', '--json'])).stages,
    (stages) => stages[1].status === 'waiting',
    `run ${pred} to wait at its QA stage`,
  );

  const unrelated = await create(repo.D, 'unrelated');
  const refused = await run(['deployment-runs', 'takeover', pred, '--successor', unrelated, '--json']);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({
    code: 'takeover_candidate_not_contained',
    details: { predecessor_commit: repo.A, successor_commit: repo.D },
  });
  const bad = await run([
    'deployment-runs',
    'takeover',
    pred,
    '--successor',
    unrelated,
    '--containment-attestation',
    '{"contained":"yes"}',
    '--json',
  ]);
  expect(bad.code).toBe(2);
  expect(jsonError(bad).code).toBe('invalid_containment_attestation');

  const succ = await create(repo.C, 'succ');
  const done = await run(['deployment-runs', 'takeover', pred, '--successor', succ, '--json']);
  expect(done.code).toBe(0);
  expect(json(done)).toMatchObject({
    predecessor_run_id: pred,
    successor_run_id: succ,
    predecessor_status: 'cancelled',
    moved_members: ['WEB-1'],
    containment: { basis: 'git', contained: true },
  });
  expect(
    json(await run(['deployment-runs', 'get', succ, 'takeover_chain', 'supersedes_run_id', '--json'])),
  ).toMatchObject({
    takeover_chain: [pred, succ],
    supersedes_run_id: pred,
  });
  const text = await run(['deployment-runs', 'get', succ]);
  expect(text.stdout).toContain(`takeover chain: ${pred} -> ${succ}`);
  const handle = w.client.workflow.getHandle(runWorkflowId(pred));
  expect(await handle.result()).toEqual({ status: 'superseded' });
  expect((await handle.describe()).typedSearchAttributes.get(RUN_STATUS_KEY)).toBe('superseded');
  // Issue 14 (T3): the taken-over predecessor names its successor, on retry and execute alike.
  for (const verb of ['retry', 'execute']) {
    const again = await run(['deployment-runs', verb, pred, '--json']);
    expect(again.code).toBe(1);
    expect(jsonError(again)).toMatchObject({
      code: 'run_superseded',
      details: { run_id: pred, superseded_by_run_id: succ },
    });
    expect(jsonError(again).recovery).toContain(`yoke deployment-runs get ${succ}`);
  }
  // T2: its QA moved with it: a verdict or a check for the predecessor names the successor and repeats there
  const verdict = await run([
    'deployment-runs',
    'qa-verdict',
    pred,
    '--check',
    'smoke-test',
    '--status',
    'failed',
    '--json',
  ]);
  expect(verdict.code).toBe(1);
  expect(jsonError(verdict)).toMatchObject({
    code: 'run_superseded',
    recovery: `record it on the successor: yoke deployment-runs qa-verdict ${succ} --check smoke-test --status failed`,
    details: { run_id: pred, superseded_by_run_id: succ },
  });
  const added = await run(['deployment-runs', 'qa', 'add', pred, '--check', 'late', '--stage', 'stage-qa', '--json']);
  expect(jsonError(added)).toMatchObject({ code: 'run_superseded', details: { superseded_by_run_id: succ } });
  expect(jsonError(added).recovery).toContain(`yoke deployment-runs qa add ${succ} --check late --stage stage-qa`);
  // T2: watching the predecessor ends there and points to the successor that carries its work
  const watched = await run(['deployment-runs', 'watch', pred, '--timeout', '10']);
  expect(watched.code).toBe(1);
  expect(watched.stdout).toContain(
    `next: taken over by ${succ}, which carries its members and QA: yoke deployment-runs watch ${succ}`,
  );
  const watchedJson = await run(['deployment-runs', 'watch', pred, '--timeout', '10', '--json']);
  expect(watchedJson.stdout).toContain(`"recovery":"taken over by ${succ}`);
}, 120_000);
