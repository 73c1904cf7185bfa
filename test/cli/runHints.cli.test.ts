import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke, type CliResult } from '../helpers/cli';
import { createTestRepository, type TestRepository } from '../helpers/git';
import { releaseDefinition, releaseRunArgs, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { until } from '../helpers/until';

/**
 * What the deployment-run and QA CLI says a user does next, through the built CLI: the command a
 * refusal names works as given, what --json shows the text shows too, and a run that cannot move
 * on by itself (created, or held by blocking QA recorded failed) says how it moves.
 */
let t: TestDatabase;
let w: TestWorker;
let stage: HttpTarget;
let repo: TestRepository;
let env: Record<string, string>;
/** Executed by d1 at candidate A with member WEB-1, waiting at stage-qa; later taken over. */
let runA: string;
/** The run whose start-for-item took runA over (created, holding its occupancy). */
let successor: string;
const run = (args: string[], session = 'd1') => yoke(t.url, args, { ...env, YOKE_SESSION_ID: session });

function ok(r: CliResult): CliResult {
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  return r;
}

const waitAtQa = (runId: string) =>
  until(
    async () => json(ok(await run(['deployment-runs', 'get', runId, 'stages', '--json']))).stages,
    (stages: { status: string }[]) => stages[1]!.status === 'waiting',
    `run ${runId} to wait at its QA stage`,
  );

const statusOf = async (runId: string) =>
  json(ok(await run(['deployment-runs', 'get', runId, 'status', '--json']))).status as string;

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  stage = await startHttpTarget();
  repo = createTestRepository();
  env = { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: w.taskQueue };
  const definition = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: stage.url,
    prodUrl: 'https://web.example.test',
    // an item-scoped QA stage no run here reaches: its members' plan blockers are read all the same
    extraStages: [
      {
        name: 'item-qa',
        kind: 'qa',
        target: 'stage',
        scope: 'item',
        checks: [{ name: 'accept', plan: 'PLAN-7' }],
      } as never,
    ],
  });
  // A manual case first, so the execution waits there while its automatic case's interruption is recorded.
  definition.plans.push({
    id: 'two',
    cases: [
      { name: 'look', manual: { instructions: 'look at it' } },
      { name: 'auto', automatic: { test_machine: 'lab', command: 'true' } } as never,
    ],
  });
  // lab is registered with a pinned host key and never dialled: nothing here runs on it.
  const keys = mkdtempSync(join(tmpdir(), 'yoke-hints-'));
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keys, 'host')]);
  await setUp(run, [
    ['apply', '-f', writeDefinition({ ...definition, repository: repo.dir })],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver'],
    ['sessions', 'register', '--session', 'd2', '--actor', 'second'],
    [
      'test-machine',
      'add',
      'lab',
      '--host',
      '127.0.0.1',
      '--port',
      '1',
      '--user',
      'qa',
      '--credential',
      'lab',
      '--host-key-file',
      join(keys, 'host.pub'),
    ],
  ]);
  runA = json(ok(await run([...releaseRunArgs(repo.A, 'hints-a', ['WEB-1']), '--json']))).run_id;
  ok(await run(['deployment-runs', 'execute', runA]));
  await waitAtQa(runA);
}, 180_000);

afterAll(async () => {
  await stage.close();
  await w.shutdown();
  await t.drop();
});

const begin = async (plan: string, item?: string) =>
  json(
    ok(
      await run([
        'qa',
        'begin',
        '--run',
        runA,
        '--stage',
        'stage-qa',
        '--plan',
        plan,
        ...(item ? ['--item', item] : []),
        '--json',
      ]),
    ),
  ).execution_id as number;

test('Q1 issue 11: qa_execution_settled names the qa begin that starts the execution again, --item included (qaBeginCommand)', async () => {
  const id = await begin('PLAN-7', 'WEB-1');
  ok(await run(['qa', 'abort', String(id), '--reason', 'wrong build']));
  const again = `begin a new one: yoke qa begin --run ${runA} --stage stage-qa --plan PLAN-7 --item WEB-1`;
  const verdict = await run(['qa', 'verdict', String(id), '--case', 'look', '--verdict', 'passed', '--json']);
  expect(verdict.code).toBe(1);
  expect(jsonError(verdict)).toMatchObject({ code: 'qa_execution_settled', recovery: again });
  const abort = await run(['qa', 'abort', String(id), '--reason', 'twice']);
  expect(abort.code).toBe(1);
  expect(abort.stderr).toContain(`recovery: ${again}\n`);
}, 60_000);

test('Q1 Q4: a member of an item-scoped QA stage whose plan has no passed execution names the qa begin --item that moves it, in qa-pending --json and text', async () => {
  const begin = `yoke qa begin --run ${runA} --stage item-qa --plan PLAN-7 --item WEB-1`;
  const pending = json(ok(await run(['deployment-runs', 'qa-pending', runA, '--stage', 'item-qa', '--json'])));
  expect(pending.members).toEqual([
    expect.objectContaining({
      item: 'WEB-1',
      blockers: expect.arrayContaining(['plan PLAN-7 has no passed execution']),
      recovery: `begin a new execution: ${begin}`,
    }),
  ]);
  const text = ok(await run(['deployment-runs', 'qa-pending', runA, '--stage', 'item-qa'])).stdout;
  expect(text).toMatch(
    new RegExp(
      `member WEB-1 at item-qa: .*plan PLAN-7 has no passed execution.*\\n +next: begin a new execution: ${begin}\\n`,
    ),
  );
  // once the member's execution runs, the way on is to follow it, not to begin a second one
  const running = json(ok(await run([...begin.split(' ').slice(1), '--json']))).execution_id as number;
  const followed = json(ok(await run(['deployment-runs', 'qa-pending', runA, '--stage', 'item-qa', '--json'])));
  expect(followed.members).toEqual([
    expect.objectContaining({
      item: 'WEB-1',
      blockers: expect.arrayContaining([`execution ${running} running (plan PLAN-7)`]),
      recovery: `follow execution ${running}: yoke qa watch ${running}`,
    }),
  ]);
  ok(await run(['qa', 'abort', String(running), '--reason', 'recovery seen']));
}, 60_000);

test('W3 issue 10: qa get text shows the interruptions --json shows in waits (a case that reported no result runs again)', async () => {
  const id = await begin('two');
  await qaExecutionActivities({ db: t.db }).recordStepInterrupted({
    executionId: id,
    ordinal: 1,
    detail: 'worker lost',
  });
  const view = json(ok(await run(['qa', 'get', String(id), '--json'])));
  const why = 'step_interrupted: case auto did not report a result (worker lost); it runs again';
  expect(view.waits).toEqual([expect.objectContaining({ test_machine: 'lab', state: 'waiting', rationale: why })]);
  expect(ok(await run(['qa', 'get', String(id)])).stdout).toContain(
    `interrupted at ${view.waits[0].queued_at}: ${why} (its place in lab's line: waiting)`,
  );
  ok(await run(['qa', 'abort', String(id), '--reason', 'done looking']));
  // ended, its wait cancelled: still shown, as --json still shows it
  expect(ok(await run(['qa', 'get', String(id)])).stdout).toContain(`${why} (its place in lab's line: cancelled)`);
}, 60_000);

test("T3 D4: start-for-item that takes over a run prints next: as takeover does; qa watch's text credits a carried verdict to the run that recorded it, as qa get does", async () => {
  const id = await begin('PLAN-7', 'WEB-1');
  ok(await run(['qa', 'verdict', String(id), '--case', 'look', '--verdict', 'passed']));
  const started = ok(
    await run(['deployment-runs', 'start-for-item', 'WEB-3', '--candidate', repo.C, '--target', 'stage']),
  );
  successor = /^created run (\S+):/m.exec(started.stdout)![1]!;
  expect(started.stdout).toContain(`took over run ${runA} (`);
  expect(started.stdout).toMatch(new RegExp(`\\nnext: yoke deployment-runs execute ${successor}\\n?$`));

  expect(ok(await run(['qa', 'get', String(id)])).stdout).toMatch(
    new RegExp(`look +manual +- +passed \\(under ${runA}\\)`),
  );
  const watched = ok(await run(['qa', 'watch', String(id), '--timeout', '10']));
  expect(watched.stdout).toMatch(new RegExp(`1/1 look +manual +passed \\(under ${runA}\\)  served `));
  const lines = ok(await run(['qa', 'watch', String(id), '--timeout', '10', '--json']))
    .stdout.trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines[0]).toMatchObject({ execution_id: id, case: 'look', verdict: 'passed', verdict_run_id: runA });
}, 60_000);

test('issue 4 issue 14: watch of a created run says it waits to be executed and names the command, in text and --json, and its timeout says so too', async () => {
  const execute = `yoke deployment-runs execute ${successor}`;
  const text = await run(['deployment-runs', 'watch', successor, '--timeout', '1']);
  expect(text.code).toBe(3);
  expect(text.stdout).toMatch(new RegExp(`run ${successor} created: waiting to be executed\\n.*next: ${execute}\\n`));
  expect(text.stderr).toContain(`recovery: it waits to be executed: ${execute}, then yoke deployment-runs watch`);
  const lines = await run(['deployment-runs', 'watch', successor, '--timeout', '1', '--json']);
  expect(lines.code).toBe(3);
  expect(JSON.parse(lines.stdout.trim().split('\n')[0]!)).toMatchObject({
    run_id: successor,
    status: 'created',
    waiting_for: 'execute',
    recovery: execute,
  });
  // executed, the hint goes: the run moves by itself
  ok(await run(['deployment-runs', 'execute', successor]));
  const moving = await run(['deployment-runs', 'watch', successor, '--timeout', '1', '--json']);
  expect(JSON.parse(moving.stdout.trim().split('\n')[0]!)).toMatchObject({ waiting_for: null, recovery: null });
  ok(await run(['deployment-runs', 'terminalize', successor, '--disposition', 'cancelled', '--reason', 'test over']));
}, 60_000);

test('Q4 O4: a run held by blocking QA recorded failed says what to do next (record it again, then retry): watch, get, qa-pending, advance and retry, next: in text and recovery in --json', async () => {
  const runF = json(ok(await run([...releaseRunArgs(repo.B, 'hints-f'), '--json'], 'd2'))).run_id as string;
  ok(await run(['deployment-runs', 'execute', runF], 'd2'));
  await waitAtQa(runF);
  ok(await run(['deployment-runs', 'qa-verdict', runF, '--check', 'smoke-test', '--status', 'failed'], 'd2'));
  const record = `yoke deployment-runs qa-verdict ${runF} --check smoke-test --status passed (or --status waived)`;
  const next = `once smoke-test is fixed, record it again: ${record}, then retry: yoke deployment-runs retry ${runF}; while it reads failed, a retry fails at stage-qa again`;

  const watched = await run(['deployment-runs', 'watch', runF, '--timeout', '30'], 'd2');
  expect(watched.code).toBe(1);
  expect(watched.stdout).toMatch(/run \S+ failed \(stage stage-qa failed: blocking QA failed: smoke-test\)\n/);
  expect(watched.stdout).toContain(`next: ${next}\n`);
  const watchedJson = (await run(['deployment-runs', 'watch', runF, '--json'], 'd2')).stdout.trim().split('\n');
  expect(JSON.parse(watchedJson.at(-1)!)).toMatchObject({ status: 'failed', recovery: next });
  expect(ok(await run(['deployment-runs', 'get', runF], 'd2')).stdout).toContain(`\nnext: ${next}\n`);
  expect(json(ok(await run(['deployment-runs', 'qa-pending', runF, '--json'], 'd2')))).toMatchObject({
    run_obligations: [{ check_name: 'smoke-test', status: 'failed' }],
    recovery: next,
  });
  expect(ok(await run(['deployment-runs', 'qa-pending', runF], 'd2')).stdout).toContain(`next: ${next}`);
  // advance moves nothing on a failed run: refused (exit 1, not 0), naming the same next step
  const advance = await run(['deployment-runs', 'advance', runF, '--json'], 'd2');
  expect(advance.code).toBe(1);
  expect(jsonError(advance)).toMatchObject({
    code: 'run_not_executing',
    recovery: next,
    details: { run_id: runF, status: 'failed' },
  });
  // execute of the failed run is refused run_failed as before, naming what moves it rather than a bare retry
  const execute = await run(['deployment-runs', 'execute', runF, '--json'], 'd2');
  expect(execute.code).toBe(1);
  expect(jsonError(execute)).toMatchObject({ code: 'run_failed', recovery: next });
  // so are terminalize, add-item and remove-item of it, and get --json carries the next: line as recovery
  for (const args of [
    ['terminalize', runF, '--disposition', 'failed', '--reason', 'again'],
    ['add-item', runF, 'WEB-2'],
    ['remove-item', runF, 'WEB-2', '--reason', 'not needed'],
  ]) {
    const refused = await run(['deployment-runs', ...args, '--json'], 'd2');
    expect(refused.code).toBe(1);
    expect(jsonError(refused)).toMatchObject({ code: 'run_failed', recovery: next });
  }
  expect(json(ok(await run(['deployment-runs', 'get', runF, '--json'], 'd2')))).toMatchObject({ recovery: next });

  // R1: a failed run still retries, so its driver shows live in list as in get, until its session ends
  const row = async () =>
    json(ok(await run(['deployment-runs', 'list', '--json']))).find((r: { run_id: string }) => r.run_id === runF);
  expect(await row()).toMatchObject({ driver_session_id: 'd2', driver_live: true });
  expect(ok(await run(['deployment-runs', 'list'])).stdout).toMatch(new RegExp(`^${runF} .* d2 \\(live\\)$`, 'm'));

  // the retry says it too (the run fails at stage-qa again while the verdict stands)
  const retried = ok(await run(['deployment-runs', 'retry', runF], 'd2'));
  expect(retried.stdout).toMatch(new RegExp(`^retrying ${runF}, driven by d2\\nnext: once smoke-test is fixed, `));
  expect(retried.stdout).toContain(record);
  await until(
    () => statusOf(runF),
    (s) => s === 'failed',
    'the retried run to fail at stage-qa again',
  );
  const again = json(ok(await run(['deployment-runs', 'retry', runF, '--json'], 'd2')));
  expect(again.recovery).toContain(record);
  await until(
    () => statusOf(runF),
    (s) => s === 'failed',
    'the retried run to fail at stage-qa again',
  );

  // recorded again: nothing left to say
  ok(await run(['deployment-runs', 'qa-verdict', runF, '--check', 'smoke-test', '--status', 'passed'], 'd2'));
  expect(json(ok(await run(['deployment-runs', 'qa-pending', runF, '--json'], 'd2'))).recovery).toBeNull();
  expect(ok(await run(['deployment-runs', 'get', runF], 'd2')).stdout).not.toContain('next:');
  expect(json(ok(await run(['deployment-runs', 'get', runF, '--json'], 'd2'))).recovery).toBeNull();

  // R1: the driver's session ended (as the sweep ends a stale one): list shows it lapsed, as get does
  ok(await run(['sessions', 'end', '--session', 'd2'], 'd2'));
  expect(await row()).toMatchObject({ driver_session_id: 'd2', driver_live: false });
  expect(ok(await run(['deployment-runs', 'list'])).stdout).toMatch(new RegExp(`^${runF} .* d2 \\(lapsed\\)$`, 'm'));
  expect(ok(await run(['deployment-runs', 'get', runF])).stdout).toContain('driver: d2 (lapsed)');
}, 180_000);

test('R1: list shows the driver of a run that can never move again (taken over) not live, as get does', async () => {
  const row = json(ok(await run(['deployment-runs', 'list', '--json']))).find(
    (r: { run_id: string }) => r.run_id === runA,
  );
  expect(row).toMatchObject({ status: 'cancelled', driver_session_id: 'd1', driver_live: false });
  expect(ok(await run(['deployment-runs', 'list'])).stdout).toMatch(new RegExp(`^${runA} .* d1 \\(lapsed\\)$`, 'm'));
  expect(ok(await run(['deployment-runs', 'get', runA])).stdout).toContain('driver: d1 (lapsed)');
}, 60_000);
