import { actorFactory, type TestActor } from '../helpers/actors';
import { json, jsonError, setUp, yoke, type CliResult } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, sqlActors } from '../helpers/roles';
import { releaseDefinition, releaseRunArgs, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { untilTrue } from '../helpers/until';
import { ITEM_KEY, TARGET_ORIGIN_KEY } from '../../workflows/definitions';
import { Client } from 'pg';
import { sql } from 'kysely';
import { sweepActivities } from '../../activities/sweep';

/**
 * Defects a fourth audit found in issues 4, 5, 10 and 14, each driven through the built binary
 * as a user runs it.
 */
let t: TestDatabase;
const actors = actorFactory(() => t.url);
const raw = sqlActors(() => t.url);
let w: TestWorker;
let stage: HttpTarget;
let prod: HttpTarget;
// Production by name, so its origin always sorts after stage's 127.0.0.1 (no test deploys to it).
const prodUrl = () => prod.url.replace('127.0.0.1', 'localhost');
const env = () => ({ TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: w.taskQueue });
const asAdmin = (args: string[], extra: Record<string, string> = {}): Promise<CliResult> =>
  yoke(t.url, args, { ...env(), YOKE_SESSION_ID: 'd1', ...extra });
let alice: TestActor;

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  [stage, prod] = await Promise.all([startHttpTarget(), startHttpTarget()]);
  await setUp(asAdmin, [
    [
      'apply',
      '-f',
      writeDefinition(
        releaseDefinition({
          project: 'web',
          prefix: 'WEB',
          stageUrl: stage.url,
          prodUrl: prodUrl(),
        }),
      ),
    ],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver', '--project', 'web'],
  ]);
  alice = await actors.add('alice');
}, 120_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close()]);
  await w.shutdown();
  await raw.end();
  await actors.removeAll();
  await t.drop();
});

test('U2 issue 5: re-registering a live session with another requested model replaces the request and records the change', async () => {
  const as = (args: string[]) => alice.run(args, env());
  const first = await as(['sessions', 'register', '--session', 'a1', '--project', 'web', '--model', 'claude-opus-4-5']);
  expect(first.code).toBe(0);

  const again = await as([
    'sessions',
    'register',
    '--session',
    'a1',
    '--model',
    'claude-sonnet-4-5',
    '--effort',
    'high',
    '--json',
  ]);
  expect(again.code).toBe(0);
  expect(json(again)).toMatchObject({
    registered: false,
    requested: { model: 'claude-sonnet-4-5', effort: 'high', window: null },
    // served facts are the provider's: a request never fills them
    served: { model: null, effort: null, window: null },
    requested_changes: [
      { fact: 'model', from: 'claude-opus-4-5', to: 'claude-sonnet-4-5' },
      { fact: 'effort', from: null, to: 'high' },
    ],
  });
  const text = await as(['sessions', 'register', '--session', 'a1', '--window', '1000000']);
  expect(text.stdout).toContain('requested window: (none) -> 1000000 (recorded)');

  // the change is on the audit log, in the session's project, written as the user
  const events = json(await asAdmin(['events', 'list', '--type', 'SessionRequestChanged', '--json']));
  expect(events).toEqual([
    expect.objectContaining({
      session_id: 'a1',
      actor_id: alice.name,
      payload: expect.objectContaining({
        changes: expect.arrayContaining([expect.objectContaining({ fact: 'model' })]),
      }),
    }),
    expect.objectContaining({
      session_id: 'a1',
      payload: expect.objectContaining({ changes: [expect.objectContaining({ fact: 'window' })] }),
    }),
  ]);

  // --probe on a re-registration is kept too, never dropped silently (U13 leaves probes out)
  expect(json(await as(['sessions', 'register', '--session', 'a1', '--probe', '--json']))).toMatchObject({
    probe: true,
  });
  expect(json(await as(['sessions', 'register', '--session', 'a1', '--json']))).toMatchObject({ probe: true });

  // repeating the same request changes nothing and records nothing
  const same = await as(['sessions', 'register', '--session', 'a1', '--model', 'claude-sonnet-4-5', '--json']);
  expect(json(same).requested_changes).toEqual([]);
  expect(json(await asAdmin(['events', 'list', '--type', 'SessionRequestChanged', '--json']))).toHaveLength(2);

  // a user's own event is about its own session and no claim: a payload naming another session is refused
  const own = new Client({ connectionString: alice.url });
  await own.connect();
  try {
    const insert = (payload: string) =>
      own.query(
        `INSERT INTO events (event_type, actor_id, project_id, session_id, payload)
         VALUES ('SessionRequestChanged', session_user, (SELECT project_id FROM sessions WHERE session_id = 'a1'), 'a1', $1)`,
        [payload],
      );
    expect(await refusalOf(insert('{"session_id":"d1","changes":[]}'))).toBe('permission_denied');
    await insert('{"session_id":"a1","changes":[]}'); // the control: its own session's event is written
  } finally {
    await own.end();
  }

  // an ended session is not re-registered at all
  await as(['sessions', 'end', '--session', 'a1']);
  const ended = await as(['sessions', 'register', '--session', 'a1', '--model', 'claude-haiku-4-5', '--json']);
  expect(ended.code).toBe(1);
  expect(jsonError(ended).code).toBe('session_ended');

  // nobody records a request change for another actor's session
  const mallory = await raw.add('mallory');
  expect(
    await refusalOf(
      mallory.q(
        `INSERT INTO events (event_type, project_id, session_id, payload) VALUES ('SessionRequestChanged', 1, 'a1', '{}')`,
      ),
    ),
  ).toBe('permission_denied');
});

test('Q5 issue 4: a blocking-QA read of advance past its deadline names advance itself as the rerun, not qa-pending', async () => {
  const runId = json(await asAdmin([...releaseRunArgs('b4b4b4b4b4b4b401', 'q5-advance'), '--json'])).run_id;
  const locker = new Client({ connectionString: t.url });
  await locker.connect();
  try {
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE deployment_run_qa IN ACCESS EXCLUSIVE MODE');
    const r = await asAdmin(['deployment-runs', 'advance', runId, '--json'], { YOKE_QA_READ_DEADLINE_MS: '150' });
    expect(r.code).toBe(1);
    const error = jsonError(r);
    expect(error).toMatchObject({ code: 'read_deadline_exceeded', details: { attempts: 4 } });
    expect(error.message).toContain('could not evaluate blocking QA');
    expect(error.recovery).toContain(`rerun: yoke deployment-runs advance ${runId}`);
    expect(error.recovery).not.toContain('qa-pending');
  } finally {
    await locker.query('ROLLBACK');
    await locker.end();
  }
});

test('issue 4 Q4: a memberless run carries no YokeItem, YokeItem follows add-item and remove-item while the run executes, and advance at its QA stage says it waits there', async () => {
  const runId = json(await asAdmin([...releaseRunArgs('b4b4b4b4b4b4b402', 'items-label'), '--json'])).run_id;
  expect((await asAdmin(['deployment-runs', 'execute', runId])).code).toBe(0);
  const workflowId = `deployment-run/${runId}`;
  // what an operator's `temporal workflow list` (visibility) shows for the run
  const listedItems = async (): Promise<string[] | undefined | 'absent'> => {
    for await (const wf of w.client.workflow.list({
      query: `WorkflowId = "${workflowId}" AND YokeRunStatus = "executing"`,
    }))
      return wf.typedSearchAttributes.get(ITEM_KEY) ?? undefined;
    return 'absent';
  };
  const listedBy = async (item: string) => {
    const ids: string[] = [];
    for await (const wf of w.client.workflow.list({ query: `YokeItem = "${item}"` })) ids.push(wf.workflowId);
    return ids.includes(workflowId);
  };
  await untilTrue(async () => (await listedItems()) !== 'absent', 'the executing run listed');
  // never [""]: Temporal's visibility stored the empty list that way
  expect(await listedItems()).toBeUndefined();

  // Q4: a run waiting at its QA stage is not yet held before its completing stage, and advance says so
  await untilTrue(
    async () =>
      json(await asAdmin(['deployment-runs', 'get', runId, 'current_stage', '--json'])).current_stage === 'stage-qa',
    'the run at its QA stage',
  );
  const advance = await asAdmin(['deployment-runs', 'advance', runId]);
  expect(advance.code).toBe(5);
  expect(advance.stdout).toContain(`run ${runId} waits on blocking QA (not yet at deploy-production):`);
  expect(advance.stdout).toContain('smoke-test at stage-qa: pending');

  const addedOne = await asAdmin(['deployment-runs', 'add-item', runId, 'WEB-1']);
  expect(addedOne.stderr).toBe('');
  expect(addedOne.code).toBe(0);
  await untilTrue(() => listedBy('WEB-1'), 'the run listed by its new member WEB-1');
  expect((await asAdmin(['deployment-runs', 'add-item', runId, 'WEB-2'])).code).toBe(0);
  await untilTrue(async () => JSON.stringify(await listedItems()) === '["WEB-1","WEB-2"]', 'both members labelled');

  expect((await asAdmin(['deployment-runs', 'remove-item', runId, 'WEB-1', '--reason', 'not ready'])).code).toBe(0);
  await untilTrue(async () => !(await listedBy('WEB-1')), 'WEB-1 no longer labels the run');
  expect((await asAdmin(['deployment-runs', 'remove-item', runId, 'WEB-2', '--reason', 'not ready'])).code).toBe(0);
  await untilTrue(async () => (await listedItems()) === undefined, 'no member left: no YokeItem');
  expect(
    (await w.client.workflow.getHandle(workflowId).describe()).typedSearchAttributes.get(ITEM_KEY),
  ).toBeUndefined();
  // its origins are free again for the next tests' runs
  expect(
    (await asAdmin(['deployment-runs', 'terminalize', runId, '--disposition', 'cancelled', '--reason', 'done'])).code,
  ).toBe(0);
}, 120_000);

test('I2 issue 4: an unkeyed start-for-item that times out is not repeated (a repeat without a key made a second run) and says how to look', async () => {
  const holder = new Client({ connectionString: t.url });
  await holder.connect();
  try {
    const { rows } = await holder.query<{ project_id: number }>("SELECT project_id FROM projects WHERE name = 'web'");
    await holder.query('BEGIN');
    await holder.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`run-create:${rows[0]!.project_id}`]);
    const r = await asAdmin(
      ['deployment-runs', 'start-for-item', 'WEB-3', '--candidate', 'b4b4b4b4b4b4b403', '--target', 'stage', '--json'],
      { YOKE_CREATE_TIMEOUT_SECONDS: '0.5' },
    );
    expect(r.code).toBe(3);
    const error = jsonError(r);
    expect(error.code).toBe('deployment_run_create_timeout');
    expect(error.message).toContain('no --idempotency-key, so it was not repeated');
    expect(error.recovery).toContain('yoke deployment-runs list');
    expect(error.recovery).toContain('--idempotency-key');
  } finally {
    await holder.query('ROLLBACK');
    await holder.end();
  }
  const made = await t.db
    .selectFrom('deployment_runs')
    .select('run_id')
    .where('candidate_sha', '=', 'b4b4b4b4b4b4b403')
    .execute();
  expect(made.length).toBeLessThanOrEqual(1);
});

test('issue 4: apply --dry-run shows a changed repository as a change to the project, and names every changed field', async () => {
  const base = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prodUrl() });
  const moved = writeDefinition({
    ...base,
    repository: '/srv/git/web',
    environments: base.environments.map((e) => (e.name === 'stage' ? { ...e, url: 'http://127.0.0.1:1' } : e)),
  });
  const dry = await asAdmin(['apply', '-f', moved, '--dry-run', '--json']);
  expect(dry.code).toBe(0);
  expect(json(dry).summary).toMatchObject({ create: 0, update: 2 });
  expect(json(dry).changes).toEqual(
    expect.arrayContaining([
      { kind: 'project', name: 'web', action: 'update', fields: ['repository'] },
      { kind: 'environment', name: 'stage', action: 'update', fields: ['url'] },
    ]),
  );
  const text = await asAdmin(['apply', '-f', moved, '--dry-run']);
  expect(text.stdout).toContain('~ project web (repository)');
  expect(text.stdout).toContain('~ environment stage (url)');
  // the dry run wrote nothing: the same file still shows both changes, and the applied one says it did them
  const applied = await asAdmin(['apply', '-f', moved]);
  expect(applied.stdout).toMatch(/^applied web: 0 created, 2 updated/);
  expect(applied.stdout).toContain('~ project web (repository)');
  expect(json(await asAdmin(['apply', '-f', moved, '--dry-run', '--json'])).summary.update).toBe(0);
  // back as it was, for the other tests
  expect((await asAdmin(['apply', '-f', writeDefinition(base)])).code).toBe(0);
});

test('issue 4: a part the file leaves out is reported kept (apply removes nothing), in the dry run and the apply', async () => {
  const base = releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: prodUrl() });
  const extra = { ...base.flows[0]!, name: 'quick', completion_flow: false };
  expect((await asAdmin(['apply', '-f', writeDefinition({ ...base, flows: [...base.flows, extra] })])).code).toBe(0);
  const without = writeDefinition(base);
  const dry = json(await asAdmin(['apply', '-f', without, '--dry-run', '--json']));
  expect(dry.summary).toMatchObject({ kept: 1 });
  expect(dry.changes).toContainEqual({ kind: 'flow', name: 'quick', action: 'kept' });
  const text = await asAdmin(['apply', '-f', without]);
  expect(text.stdout).toMatch(/^applied web: .*, 1 not in the file \(kept: apply removes nothing\)/);
  expect(text.stdout).toContain('  = flow quick (not in the file: kept)');
});

test('R1 C1 issue 4: a driver that heartbeats its run keeps its session alive, so the stale-session sweep does not end it and its attachment', async () => {
  expect(
    (await asAdmin(['sessions', 'register', '--session', 'h1', '--actor', 'driver', '--project', 'web'])).code,
  ).toBe(0);
  const runId = json(
    await asAdmin([...releaseRunArgs('b4b4b4b4b4b4b404', 'driver-alive'), '--json'], { YOKE_SESSION_ID: 'h1' }),
  ).run_id;
  // h1 drives the run (as its execute would make it) and registered long ago; it has only driven its run since
  await sql`UPDATE deployment_runs SET driver_session_id = 'h1', driver_heartbeat_at = now() WHERE run_id = ${runId}`.execute(
    t.db,
  );
  await sql`UPDATE sessions SET heartbeat_at = now() - interval '20 minutes' WHERE session_id = 'h1'`.execute(t.db);
  const beat = await asAdmin(['deployment-runs', 'heartbeat', runId, '--json'], { YOKE_SESSION_ID: 'h1' });
  expect(beat.code).toBe(0);
  expect(json(beat)).toMatchObject({ driver_session_id: 'h1' });

  const swept = await sweepActivities({ db: t.db }).sweepStaleSessions({ staleAfterMs: 15 * 60 * 1000 });
  expect(JSON.stringify(swept)).not.toContain('"h1"');
  const again = await asAdmin(['deployment-runs', 'heartbeat', runId, '--json'], { YOKE_SESSION_ID: 'h1' });
  expect(again.stderr).toBe('');
  expect(json(await asAdmin(['deployment-runs', 'get', runId, 'driver', '--json'])).driver).toMatchObject({
    session_id: 'h1',
    live: true,
  });
});

test('T1 issue 14: repeating a takeover that is done says so with run_superseded and names the successor to continue with', async () => {
  const pred = json(await asAdmin([...releaseRunArgs('b4b4b4b4b4b4b405', 'takeover-pred'), '--json'])).run_id;
  expect((await asAdmin(['deployment-runs', 'execute', pred])).code).toBe(0);
  await untilTrue(
    async () =>
      json(await asAdmin(['deployment-runs', 'get', pred, 'current_stage', '--json'])).current_stage === 'stage-qa',
    'the predecessor waiting at its QA stage',
  );
  const succ = json(await asAdmin([...releaseRunArgs('b4b4b4b4b4b4b406', 'takeover-succ'), '--json'])).run_id;
  const attestation = JSON.stringify({
    predecessor_commit: 'b4b4b4b4b4b4b405',
    successor_commit: 'b4b4b4b4b4b4b406',
    contained: true,
    attested_by: 'lane /srv/lanes/web',
  });
  const takeover = ['deployment-runs', 'takeover', pred, '--successor', succ, '--containment-attestation', attestation];
  expect((await asAdmin(takeover)).code).toBe(0);
  const again = await asAdmin([...takeover, '--json']);
  expect(again.code).toBe(1);
  expect(jsonError(again)).toMatchObject({
    code: 'run_superseded',
    recovery: `continue with the successor: yoke deployment-runs execute ${succ}`,
    details: { predecessor_run_id: pred, successor_run_id: succ },
  });
  expect(jsonError(again).message).toContain(`already taken over by run ${succ}`);
  expect(
    (await asAdmin(['deployment-runs', 'terminalize', succ, '--disposition', 'cancelled', '--reason', 'done'])).code,
  ).toBe(0);
}, 120_000);

test('issue 4: a run targeting production carries its own target origin as YokeTargetOrigin, not the first origin it occupies', async () => {
  const args = releaseRunArgs('b4b4b4b4b4b4b407', 'prod-origin');
  args[args.indexOf('--target') + 1] = 'production';
  const runId = json(await asAdmin([...args, '--json'])).run_id;
  expect(json(await asAdmin(['deployment-runs', 'execute', runId, '--json']))).toMatchObject({
    occupancy_units: [stage.url, prodUrl()],
    target_origin: prodUrl(),
  });
  const origins = async (): Promise<unknown[]> => {
    const found: unknown[] = [];
    for await (const wf of w.client.workflow.list({ query: `WorkflowId = "deployment-run/${runId}"` }))
      found.push(wf.typedSearchAttributes.get(TARGET_ORIGIN_KEY));
    return found;
  };
  await untilTrue(async () => (await origins()).length > 0, 'the run listed');
  expect(await origins()).toEqual([prodUrl()]);
  expect(
    (await asAdmin(['deployment-runs', 'terminalize', runId, '--disposition', 'cancelled', '--reason', 'done'])).code,
  ).toBe(0);
}, 120_000);
