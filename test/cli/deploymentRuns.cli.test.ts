import { sql } from 'kysely';
import { Client } from 'pg';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke, setUp } from '../helpers/cli';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget, releaseRunArgs } from '../helpers/runs';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { untilTrue as until, until as untilRead } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;
let stage: HttpTarget;
let prod: HttpTarget;
let env: Record<string, string>;
let file: string;
const run = (args: string[], extra: Record<string, string> = {}) => yoke(t.url, args, { ...env, ...extra });

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  [stage, prod] = await Promise.all([startHttpTarget(), startHttpTarget()]);
  env = {
    TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!,
    YOKE_TASK_QUEUE: w.taskQueue,
    YOKE_SESSION_ID: 'd1',
  };
  file = writeDefinition(releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url }));
  await setUp(run, [
    ['apply', '-f', file],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver'],
    ['sessions', 'register', '--session', 'd2', '--actor', 'other'],
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close()]);
  await w.shutdown();
  await t.drop();
});

const createArgs = (key: string, extra: string[] = []) => [...releaseRunArgs('abcdef1234', key, ['WEB-1']), ...extra];

test('apply is idempotent, --dry-run writes nothing, and every problem in a bad file is named with its path and line', async () => {
  const again = json(await run(['apply', '-f', file, '--json']));
  expect(again.summary).toMatchObject({ create: 0, update: 0 });
  const changed = writeDefinition({
    ...releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url }),
    items: [{ id: 'WEB-9', title: 'New' }],
  });
  const dry = await run(['apply', '-f', changed, '--dry-run']);
  expect(dry.stdout).toMatch(/^would apply web: 1 to create/);
  expect(dry.stdout).toContain('+ item WEB-9');
  expect(json(await run(['apply', '-f', changed, '--dry-run', '--json'])).summary.create).toBe(1); // still not written

  const bad = writeDefinition({
    project: 'web',
    item_prefix: 'WEB',
    environments: [{ name: 'stage', tier: 'moon' }],
    flows: [{ name: 'f', stages: [{ name: 'd', kind: 'deploy', target: 'nowhere' }] }],
  });
  const refused = await run(['apply', '-f', bad, '--json']);
  expect(refused.code).toBe(2);
  const error = jsonError(refused);
  expect(error.code).toBe('invalid_project_definition');
  const problems = (error.details.problems as { path: string; line: number | null }[]).map((p) => p.path);
  expect(problems).toEqual(
    expect.arrayContaining([
      'environments[0].tier',
      'environments[0]',
      'flows[0].stages[0].action',
      'flows[0].stages[0].target',
    ]),
  );
  expect((error.details.problems as { line: number | null }[]).every((p) => typeof p.line === 'number')).toBe(true);
});

test('I1 create prints a receipt; a repeat replays it; a changed input exits 1 with idempotency_key_conflict', async () => {
  const first = await run([...createArgs('cli-1'), '--json']);
  expect(first.code).toBe(0);
  const receipt = json(first);
  expect(receipt).toMatchObject({ replayed: false, idempotency_basis: 'recorded_key', member_items: ['WEB-1'] });
  expect(receipt.warnings).toEqual([
    expect.objectContaining({ requirement_id: 'WEB-1/prod-canary', declared_environment: 'production' }),
  ]);
  expect(json(await run([...createArgs('cli-1'), '--json']))).toMatchObject({ run_id: receipt.run_id, replayed: true });
  const conflict = await run(createArgs('cli-1', ['--item', 'WEB-2']));
  expect(conflict.code).toBe(1);
  expect(conflict.stderr).toMatch(
    new RegExp(
      `^idempotency_key_conflict: idempotency key cli-1 already created run ${receipt.run_id} with different items`,
    ),
  );
  // I1: the replay returns the original run as it is now, members included, not the request's echo
  const removed = await run(['deployment-runs', 'remove-item', receipt.run_id, 'WEB-1', '--reason', 'moved out']);
  expect(removed.code).toBe(0);
  expect(json(await run([...createArgs('cli-1'), '--json']))).toMatchObject({
    run_id: receipt.run_id,
    replayed: true,
    member_items: [],
    warnings: [], // WEB-1's untargeted prod-canary went with it
  });
  const missingKey = await run([
    'deployment-runs',
    'create',
    '--project',
    'web',
    '--flow',
    'release',
    '--target',
    'stage',
    '--candidate',
    'abcdef1234',
  ]);
  expect(missingKey.code).toBe(2);
  expect(missingKey.stderr).toContain('--idempotency-key');
});

test('issue 4 I1 D5 D2 create takes several items (and requirement ids) after one flag, --item WEB-1 WEB-2, as after a repeated flag; get --include-member-closure prints the diagnostic in text too', async () => {
  const listed = await run([...releaseRunArgs('abcdef1234', 'cli-items'), '--item', 'WEB-1', 'WEB-2', '--json']);
  expect({ code: listed.code, stderr: listed.stderr }).toEqual({ code: 0, stderr: '' });
  expect(json(listed).member_items).toEqual(['WEB-1', 'WEB-2']);
  // the same request in the repeated form is the same run: a replay, not a conflict
  const repeated = json(await run([...releaseRunArgs('abcdef1234', 'cli-items', ['WEB-1', 'WEB-2']), '--json']));
  expect(repeated).toMatchObject({ run_id: json(listed).run_id, replayed: true, member_items: ['WEB-1', 'WEB-2'] });
  // --requirement-id (and --plan-id) take several values after one flag on create too
  const selected = await run([
    ...releaseRunArgs('abcdef1234', 'cli-selection'),
    '--item',
    'WEB-1',
    'WEB-2',
    '--requirement-id',
    'WEB-1/checkout-e2e',
    'gift-smoke',
    '--json',
  ]);
  expect({ code: selected.code, stderr: selected.stderr }).toEqual({ code: 0, stderr: '' });
  const closure = json<{ member_closure: { members: { item: string; requirement_ids: string[] }[] } }>(
    await run(['deployment-runs', 'get', json(selected).run_id, '--include-member-closure', '--json']),
  ).member_closure;
  expect(closure.members.map((m) => [m.item, m.requirement_ids])).toEqual([
    ['WEB-1', ['WEB-1/checkout-e2e']],
    ['WEB-2', ['gift-smoke']],
  ]);
  // D2: asked for in text, the diagnostic is printed too (it was shown only with --json)
  const text = await run(['deployment-runs', 'get', json(selected).run_id, '--include-member-closure']);
  expect(text.code).toBe(0);
  expect(text.stdout).toContain('member closure:');
  expect(text.stdout).toMatch(/ {2}WEB-1 \(final\): (clear|blocked)/);
  expect(text.stdout).toContain('    requirements: WEB-1/checkout-e2e');
  expect(text.stdout).toContain('    requirements: gift-smoke');
  expect((await run(['deployment-runs', 'get', json(selected).run_id])).stdout).not.toContain('member closure:');
});

test('issue 4 I1 D6: a replay answers with the original receipt, its warnings included (they were dropped)', async () => {
  const first = json(await run([...createArgs('cli-warn'), '--json']));
  expect(first.warnings).toHaveLength(1);
  const replay = json(await run([...createArgs('cli-warn'), '--json']));
  expect(replay).toEqual({ ...first, replayed: true });
  expect((await run(createArgs('cli-warn'))).stdout).toContain('warning: obligation WEB-1/prod-canary');
});

test('I2 a create that times out is repeated once under the same key and reports deployment_run_create_timeout_recovered', async () => {
  const admin = new Client({ connectionString: t.url });
  await admin.connect();
  const { rows } = await admin.query<{ project_id: number }>("SELECT project_id FROM projects WHERE name = 'web'");
  await admin.query('BEGIN');
  await admin.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`run-create:${rows[0]!.project_id}`]);
  const pending = run([...createArgs('cli-timeout'), '--json'], { YOKE_CREATE_TIMEOUT_SECONDS: '3' });
  // wait on the events, not the clock: the first attempt waits on the lock, gives up, and the
  // repeat waits again (a new waiting statement). Polled from outside the lock holder's
  // transaction, whose activity snapshot would stay frozen.
  const waiter = async (not?: string): Promise<string> => {
    const waiting = await untilRead(
      async () =>
        (
          await sql<{ id: string }>`
            SELECT a.pid || '@' || a.query_start AS id FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND NOT l.granted`.execute(t.db)
        ).rows.filter((w) => w.id !== not),
      (rows) => rows.length > 0,
      'a create to wait on the advisory lock',
      { everyMs: 50 },
    );
    return waiting[0]!.id;
  };
  await waiter(await waiter());
  await admin.query('COMMIT');
  await admin.end();
  const r = await pending;
  expect(r.code).toBe(0);
  expect(json(r).warnings).toEqual(
    expect.arrayContaining([expect.objectContaining({ code: 'deployment_run_create_timeout_recovered' })]),
  );

  // two timeouts: the user is told to re-run the identical command
  const admin2 = new Client({ connectionString: t.url });
  await admin2.connect();
  await admin2.query('BEGIN');
  await admin2.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`run-create:${rows[0]!.project_id}`]);
  const twice = await run([...createArgs('cli-timeout-2'), '--json'], { YOKE_CREATE_TIMEOUT_SECONDS: '0.5' });
  await admin2.query('ROLLBACK');
  await admin2.end();
  expect(twice.code).toBe(3);
  expect(jsonError(twice)).toMatchObject({
    code: 'deployment_run_create_timeout',
    recovery: expect.stringContaining('re-run the identical command'),
  });
}, 120_000);

test('O2 R1 execute starts the workflow and makes you the driver; watch --json follows it stage by stage', async () => {
  const receipt = json(await run([...createArgs('cli-exec'), '--json']));
  const executed = await run(['deployment-runs', 'execute', receipt.run_id, '--json']);
  expect(executed.code).toBe(0);
  expect(json(executed)).toMatchObject({
    status: 'executing',
    driver_session_id: 'd1',
    occupancy_units: [stage.url, prod.url].sort(),
  });
  // operators find runs by project, status and item in the Web UI / temporal workflow list
  const listed = async (query: string) => {
    const ids: string[] = [];
    for await (const wf of w.client.workflow.list({ query })) ids.push(wf.workflowId);
    return ids;
  };
  await until(
    async () =>
      (await listed(`YokeProject = "web" AND YokeRunStatus = "executing" AND YokeItem = "WEB-1"`)).includes(
        `deployment-run/${receipt.run_id}`,
      ),
    'the executing run listed by its search attributes',
  );
  const elsewhere = await run(['deployment-runs', 'add-item', receipt.run_id, 'WEB-2', '--json'], {
    YOKE_SESSION_ID: 'd2',
  });
  expect(elsewhere.code).toBe(1);
  expect(jsonError(elsewhere)).toMatchObject({ code: 'run_driven_elsewhere', details: { driver_session_id: 'd1' } });

  const other = json(
    await run([
      'deployment-runs',
      'create',
      '--project',
      'web',
      '--flow',
      'hotfix',
      '--target',
      'stage',
      '--candidate',
      'fedcba9876',
      '--idempotency-key',
      'cli-other',
      '--json',
    ]),
  );
  const occupied = await run(['deployment-runs', 'execute', other.run_id], { YOKE_SESSION_ID: 'd2' });
  expect(occupied.code).toBe(1);
  expect(occupied.stderr).toMatch(
    new RegExp(
      `^target_occupied: origin ${stage.url.replace(/[.]/g, '\\.')} is occupied by run ${receipt.run_id} \\(project web, stage`,
    ),
  );
  expect(occupied.stderr).toContain(`recovery: re-run the start once ${receipt.run_id} finishes deploying`);

  const watching = run(['deployment-runs', 'watch', receipt.run_id, '--json', '--interval-ms', '100']);
  const watchingText = run(['deployment-runs', 'watch', receipt.run_id, '--interval-ms', '50']);
  for (const check of ['smoke-test', 'WEB-1/checkout-e2e']) {
    await until(
      async () =>
        (await run(['deployment-runs', 'qa-verdict', receipt.run_id, '--check', check, '--status', 'passed'])).code ===
        0,
      `the ${check} verdict accepted`,
    );
  }
  await until(
    async () => (await run(['deployment-runs', 'approve', receipt.run_id, '--stage', 'signoff'])).code === 0,
    'the approval accepted',
  );
  const watched = await watching;
  expect(watched.code).toBe(0);
  // R1: a watch that reaches an approval stage says how to approve it
  const watchedText = await watchingText;
  expect(watchedText.code).toBe(0);
  expect(watchedText.stdout).toMatch(
    new RegExp(
      `signoff +approval +waiting  approve with: yoke deployment-runs approve ${receipt.run_id} --stage signoff`,
    ),
  );
  const lines = watched.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines[lines.length - 1]).toMatchObject({ run_id: receipt.run_id, status: 'succeeded' });
  expect(lines.some((l) => l.current_stage === 'stage-qa')).toBe(true);
  expect(prod.deploys).toContain('abcdef1234');
  await until(
    async () => (await listed(`YokeRunStatus = "succeeded"`)).includes(`deployment-run/${receipt.run_id}`),
    'the run listed as succeeded',
  );

  const fields = json(await run(['deployment-runs', 'get', receipt.run_id, 'status', 'carried_work', '--json']));
  expect(fields).toEqual({
    run_id: receipt.run_id,
    status: 'succeeded',
    carried_work: {
      recorded: true,
      items: [{ item: 'WEB-1', requirement_ids: ['WEB-1/checkout-e2e'], derived: true }],
    },
  });
  const unknown = await run(['deployment-runs', 'get', receipt.run_id, 'colour']);
  expect(unknown.code).toBe(2);
}, 240_000); // some twenty CLI runs: generous for a loaded machine

/** `deployment-runs create --json` of web's preview flow of that name, to its preview environment. */
const previewArgs = (preview: string, key: string) => [
  'deployment-runs',
  'create',
  '--project',
  'web',
  '--flow',
  preview,
  '--target',
  preview,
  '--candidate',
  'abcdef1234',
  '--idempotency-key',
  key,
  '--json',
];

test('O4 issue 10: retry and execute of a cancelled run answer run_cancelled even while Temporal is down (no temporal_unreachable)', async () => {
  const created = json(await run(previewArgs('preview-b', 'pb-cancelled')));
  const cancel = [
    'deployment-runs',
    'terminalize',
    created.run_id,
    '--disposition',
    'cancelled',
    '--reason',
    'dropped',
  ];
  expect((await run(cancel)).code).toBe(0);
  const down = { TEMPORAL_ADDRESS: '127.0.0.1:9' };
  for (const verb of ['retry', 'execute']) {
    const refused = await run(['deployment-runs', verb, created.run_id, '--json'], down);
    expect(refused.code).toBe(1);
    expect(jsonError(refused)).toMatchObject({ code: 'run_cancelled', details: { run_id: created.run_id } });
  }
  // A run that can walk still needs Temporal first: nothing moves while it is down.
  const other = json(await run(previewArgs('preview-b', 'pb-walkable')));
  const unreachable = await run(['deployment-runs', 'execute', other.run_id, '--json'], down);
  expect(unreachable.code).toBe(3);
  expect(jsonError(unreachable).code).toBe('temporal_unreachable');
  expect(json(await run(['deployment-runs', 'get', other.run_id, 'status', '--json'])).status).toBe('created');
  expect(
    (await run(['deployment-runs', 'terminalize', other.run_id, '--disposition', 'cancelled', '--reason', 'x'])).code,
  ).toBe(0);
});

test('O2 execute without a worker still occupies and refuses the next start; the run waits for a worker', async () => {
  const noWorker = { YOKE_TASK_QUEUE: 'nobody-polls-this' };
  const args = (key: string) => previewArgs('preview-a', key);
  const first = json(await run(args('pa-1'), noWorker));
  const second = json(await run(args('pa-2'), noWorker));
  const started = await run(['deployment-runs', 'execute', first.run_id], noWorker);
  expect(started.code).toBe(0);
  expect(started.stderr).toContain('no yoke worker polls task queue "nobody-polls-this"');
  const refused = await run(['deployment-runs', 'execute', second.run_id, '--json'], noWorker);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({
    code: 'target_occupied',
    details: { origin: 'preview:web/pr-a', holder: { run_id: first.run_id } },
  });
  expect(
    (
      await run(
        ['deployment-runs', 'terminalize', first.run_id, '--disposition', 'cancelled', '--reason', 'test over'],
        noWorker,
      )
    ).code,
  ).toBe(0);
});

test('issue 10: execute --json without a polling worker carries the no_worker warning in its JSON', async () => {
  const noWorker = { YOKE_TASK_QUEUE: 'nobody-polls-this' };
  const created = json(await run(previewArgs('preview-b', 'pb-json'), noWorker));
  const started = await run(['deployment-runs', 'execute', created.run_id, '--json'], noWorker);
  expect(started.code).toBe(0);
  expect(json(started)).toMatchObject({
    run_id: created.run_id,
    status: 'executing',
    warnings: [{ code: 'no_worker', message: expect.stringContaining('"nobody-polls-this"') }],
  });
  expect(started.stderr).toBe('');
  expect(
    (
      await run(
        ['deployment-runs', 'terminalize', created.run_id, '--disposition', 'cancelled', '--reason', 'test over'],
        noWorker,
      )
    ).code,
  ).toBe(0);
});

test('Q4 Q5 issue 10: an apply after execute that removes the approval stage before the completing one changes no answer: qa-pending --json says held, advance and watch exit 5', async () => {
  const noWorker = { YOKE_TASK_QUEUE: 'nobody-polls-this' };
  const runId = json(await run([...createArgs('pinned-1'), '--json'])).run_id as string;
  expect((await run(['deployment-runs', 'execute', runId], noWorker)).code).toBe(0);
  // Its deploy, QA and approval stages done (no worker walks it), blocking QA still pending.
  const r = deploymentRunActivities({ db: t.db });
  for (const ordinal of [0, 1, 2]) {
    await r.beginStage({ runId, ordinal, walk: 1 });
    await r.finishStage({ runId, ordinal, walk: 1, result: { ok: true, detail: 'test' } });
  }
  const released = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prod.url });
  const withoutSignoff = writeDefinition({
    ...released,
    flows: released.flows.map((f) =>
      f.name === 'release' ? { ...f, stages: f.stages.filter((s) => (s as { name: string }).name !== 'signoff') } : f,
    ),
  });
  expect((await run(['apply', '-f', withoutSignoff])).code).toBe(0);
  try {
    const pending = json(await run(['deployment-runs', 'qa-pending', runId, '--json'], noWorker));
    expect(pending).toMatchObject({ held: true, completing_stage: 'deploy-production' });
    const advance = await run(['deployment-runs', 'advance', runId, '--json'], noWorker);
    expect(advance.code).toBe(5);
    expect(json(advance)).toMatchObject({ held: true, advanced: false });
    const watched = await run(['deployment-runs', 'watch', runId, '--timeout', '10', '--json'], noWorker);
    expect(watched.code).toBe(5);
    expect(watched.stdout).toContain('"status":"held"');
  } finally {
    await run(['apply', '-f', file]);
    await run(
      ['deployment-runs', 'terminalize', runId, '--disposition', 'cancelled', '--reason', 'test over'],
      noWorker,
    );
  }
}, 60_000);

test('Q4 O4 a blocking check recorded failed after its QA stage passed holds the run before its completing stage: qa-pending says held, advance exits 5 naming it (never "advancing"), the workflow hold counts it, and passing it again releases the hold', async () => {
  const noWorker = { YOKE_TASK_QUEUE: 'nobody-polls-this' };
  const runId = json(await run([...createArgs('failed-after-1'), '--json'])).run_id as string;
  expect((await run(['deployment-runs', 'execute', runId], noWorker)).code).toBe(0);
  const r = deploymentRunActivities({ db: t.db });
  try {
    for (const check of ['smoke-test', 'WEB-1/checkout-e2e'])
      expect(
        (await run(['deployment-runs', 'qa-verdict', runId, '--check', check, '--status', 'passed'], noWorker)).code,
      ).toBe(0);
    // deploy-stage, stage-qa and signoff done (no worker walks it): the run is at its completing stage
    for (const ordinal of [0, 1, 2]) {
      await r.beginStage({ runId, ordinal, walk: 1 });
      await r.finishStage({ runId, ordinal, walk: 1, result: { ok: true, detail: 'test' } });
    }
    expect((await r.blockingQaHold({ runId })).unresolved).not.toContainEqual(expect.stringContaining('smoke-test'));
    const failed = await run(
      ['deployment-runs', 'qa-verdict', runId, '--check', 'smoke-test', '--status', 'failed'],
      noWorker,
    );
    expect(failed.code).toBe(0);
    expect((await r.blockingQaHold({ runId })).unresolved).toContain('smoke-test (failed)');
    const pending = json(await run(['deployment-runs', 'qa-pending', runId, '--json'], noWorker));
    expect(pending).toMatchObject({ held: true, completing_stage: 'deploy-production', nothing_outstanding: false });
    expect(pending.run_obligations).toContainEqual({
      check_name: 'smoke-test',
      stage_name: 'stage-qa',
      status: 'failed',
    });
    expect(pending.recovery).toContain('while it reads failed, the run is held before deploy-production');
    const advance = await run(['deployment-runs', 'advance', runId], noWorker);
    expect(advance.code).toBe(5);
    expect(advance.stdout).not.toContain('advancing');
    expect(advance.stdout).toContain('run obligation smoke-test at stage-qa: failed');
    expect(
      (await run(['deployment-runs', 'qa-verdict', runId, '--check', 'smoke-test', '--status', 'passed'], noWorker))
        .code,
    ).toBe(0);
    expect((await r.blockingQaHold({ runId })).unresolved).not.toContainEqual(expect.stringContaining('smoke-test'));
  } finally {
    await run(
      ['deployment-runs', 'terminalize', runId, '--disposition', 'cancelled', '--reason', 'test over'],
      noWorker,
    );
  }
}, 60_000);

test('issue 4 a run cancelled before it executed reads its stages cancelled (they will never run), as a failed run reads the stages it did not reach', async () => {
  const runId = json(await run([...createArgs('never-executed'), '--json'])).run_id as string;
  const pending = json<{ stages: { status: string }[] }>(await run(['deployment-runs', 'get', runId, '--json']));
  expect(new Set(pending.stages.map((s) => s.status))).toEqual(new Set(['pending']));
  const ended = await run([
    'deployment-runs',
    'terminalize',
    runId,
    '--disposition',
    'cancelled',
    '--reason',
    'not needed',
  ]);
  expect(ended.code).toBe(0);
  const view = json<{ status: string; stages: { status: string }[] }>(
    await run(['deployment-runs', 'get', runId, '--json']),
  );
  expect(view.status).toBe('cancelled');
  expect(new Set(view.stages.map((s) => s.status))).toEqual(new Set(['cancelled']));
});
