import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { sessionActivities } from '../../activities/sessions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jsonError, yoke, yokeBin, type CliResult } from '../helpers/cli';
import { applyWebRelease, releaseRuns } from '../helpers/runs';

/**
 * A typo in a name the user passes is refused, naming what was wrong, and writes nothing: it
 * never enrols or records something nobody declared, and never reads as "nothing there".
 */
let t: TestDatabase;
let env: Record<string, string>;
const run = (args: string[]) => yoke(t.url, args, env);
const runs = () => deploymentRunActivities({ db: t.db });
const { createdRun, waitingRun } = releaseRuns(runs);

beforeAll(async () => {
  t = await createTestDatabase();
  // Temporal answers (qa begin asks it first); no worker is needed for what these commands refuse.
  env = { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_SESSION_ID: 'd1' };
  await applyWebRelease(t.db);
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'driver', project: 'web' });
}, 60_000);

afterAll(async () => {
  await t.drop();
});

async function itemRecorded(number: number): Promise<boolean> {
  const row = await t.db
    .selectFrom('backlog_items as i')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select('i.item_id')
    .where('p.item_prefix', '=', 'WEB')
    .where('i.number', '=', number)
    .executeTakeFirst();
  return row !== undefined;
}

test('issue 4 D4: add-item naming an item nobody declared refuses item_unknown and neither records nor enrols it', async () => {
  const runId = await createdRun('abcdef1234', ['WEB-1']);
  const refused = await run(['deployment-runs', 'add-item', runId, 'WEB-97', '--json']);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({ code: 'item_unknown', details: { item: 'WEB-97' } });
  expect(await itemRecorded(97)).toBe(false);
  const members = await t.db.selectFrom('deployment_run_items').select('item_id').where('run_id', '=', runId).execute();
  expect(members).toHaveLength(1);
  // a declared item is still added
  expect((await run(['deployment-runs', 'add-item', runId, 'WEB-2'])).code).toBe(0);
});

test('issue 11 Q1: qa begin --item naming an item nobody declared refuses item_unknown and records no item', async () => {
  const runId = await waitingRun('abcdef5678');
  const refused = await run([
    ...'qa begin --stage stage-qa --plan PLAN-7 --item WEB-98 --json'.split(' '),
    '--run',
    runId,
  ]);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({ code: 'item_unknown', details: { item: 'WEB-98' } });
  expect(await itemRecorded(98)).toBe(false);
  expect(await t.db.selectFrom('qa_plan_executions').select('execution_id').execute()).toEqual([]);
});

test('issue 11 Q4: advance of a created run refuses run_not_executing (exit 1) instead of saying it is held by blocking QA (exit 5)', async () => {
  const runId = await createdRun('abcdef9abc', ['WEB-1']);
  const text = await run(['deployment-runs', 'advance', runId]);
  expect(text.code).toBe(1);
  expect(text.stdout).not.toContain('held by blocking QA');
  expect(text.stderr).toContain('run_not_executing');
  expect(text.stderr).toContain(`yoke deployment-runs execute ${runId}`);
  const refused = await run(['deployment-runs', 'advance', runId, '--json']);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({
    code: 'run_not_executing',
    details: { run_id: runId, status: 'created' },
  });
  // a cancelled run has nothing left to advance: refused too, not exit 0
  expect(
    (await run(['deployment-runs', 'terminalize', runId, '--disposition', 'cancelled', '--reason', 'gone'])).code,
  ).toBe(0);
  const cancelled = await run(['deployment-runs', 'advance', runId, '--json']);
  expect(cancelled.code).toBe(1);
  expect(jsonError(cancelled)).toMatchObject({ code: 'run_not_executing', details: { status: 'cancelled' } });
});

test('issue 3: test-machine waits NAME of a machine nobody added refuses test_machine_unknown instead of an empty line', async () => {
  const refused = await run(['test-machine', 'waits', 'lab-typo', '--json']);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({ code: 'test_machine_unknown', details: { test_machine: 'lab-typo' } });
  // every machine's line, with none added, is still an empty answer
  const all = await run(['test-machine', 'waits', '--json']);
  expect(all.code).toBe(0);
  expect(JSON.parse(all.stdout)).toEqual([]);
});

const home = mkdtempSync(join(tmpdir(), 'yoke-serve-'));

/** `yoke serve` that either refuses or, listening, is stopped after `ms` (so a wrong start cannot hang the test). */
function serveFor(
  ms: number,
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<CliResult & { listened: boolean }> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [yokeBin, 'serve', '--port', '0', ...args],
      { env: { PATH: process.env.PATH, DATABASE_URL: t.url, YOKE_HOME: home, ...extraEnv } },
      (err, stdout, stderr) => {
        clearTimeout(timer);
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr, listened: stdout.includes('127.0.0.1') });
      },
    );
    const timer = setTimeout(() => child.kill('SIGTERM'), ms);
  });
}

test('issue 15 U13: yoke serve --session naming an unregistered session refuses session_not_registered before it listens', async () => {
  const refused = await serveFor(15_000, ['--session', 'viewer-typo', '--json']);
  expect(refused.listened).toBe(false);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({ code: 'session_not_registered', details: { session_id: 'viewer-typo' } });
  expect(jsonError(refused).recovery).toContain('yoke sessions register --session viewer-typo');
  // YOKE_SESSION_ID is the same viewing session, refused the same way
  const fromEnv = await serveFor(15_000, [], { YOKE_SESSION_ID: 'viewer-typo' });
  expect(fromEnv.listened).toBe(false);
  expect(fromEnv.stderr).toContain('session_not_registered: session "viewer-typo" is not registered');
  // a registered viewing session still serves
  const served = await serveFor(4_000, ['--session', 'd1', '--json']);
  expect(served.listened).toBe(true);
}, 40_000);

test('issue 2 issue 15: yoke serve exits 3 postgres_unreachable before it listens when Postgres cannot be reached', async () => {
  const down = await serveFor(15_000, ['--json'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' });
  expect(down.listened).toBe(false);
  expect(down.code).toBe(3);
  expect(jsonError(down)).toMatchObject({ code: 'postgres_unreachable' });
  expect(jsonError(down).recovery).toContain('npm start');
}, 30_000);
