import { json, jsonError } from '../helpers/cli';
import { webReleaseCliFile } from '../helpers/runs';

/**
 * Bad input at the CLI's edge: every id is what it says (decimal digits, never empty), every
 * refusal names what was wrong with the exit status the README's table gives, and the base
 * options are the command's wherever they are written.
 */
const { db, run, createdRun } = webReleaseCliFile();

test('issue 9 issue 11: an EXECUTION id is decimal digits only (0x10 is not 16, 1e3 is not 1000): exit 2 naming EXECUTION', async () => {
  for (const [command, ...rest] of [
    ['get'],
    ['watch'],
    ['abort', '--reason', 'r'],
    ['waive', '--case', 'c', '--reason', 'r'],
    ['verdict', '--case', 'c', '--verdict', 'passed'],
  ]) {
    for (const id of ['0x10', '1e3', 'abc', '16.0']) {
      const r = await run(['qa', command!, id, ...rest, '--json']);
      expect({ command, id, code: r.code }).toEqual({ command, id, code: 2 });
      expect(jsonError(r)).toMatchObject({
        code: 'invalid_argument',
        message: 'EXECUTION: an execution id is decimal digits',
        details: { argument: 'EXECUTION', value: id, option: '--execution' },
      });
    }
  }
  // a well-formed id nobody began is still the refusal naming it
  const unknown = await run(['qa', 'get', '16', '--json']);
  expect(unknown.code).toBe(1);
  expect(jsonError(unknown)).toMatchObject({ code: 'qa_execution_not_found', details: { execution_id: 16 } });
});

test('R1 issue 11: approving a declared approval stage of a run not yet executing refuses approval_stage_not_reached (exit 1), not "no such stage" (exit 2); nothing is recorded', async () => {
  const runId = await createdRun('abcdef1234', ['WEB-1']);
  // d1 drives it, live (as its execute would make it; a heartbeat no longer seizes a created run)
  await db()
    .updateTable('deployment_runs')
    .set({ driver_session_id: 'd1', driver_heartbeat_at: new Date() })
    .where('run_id', '=', runId)
    .execute();
  const early = await run(['deployment-runs', 'approve', runId, '--stage', 'signoff', '--json']);
  expect(early.code).toBe(1);
  expect(jsonError(early)).toMatchObject({
    code: 'approval_stage_not_reached',
    details: { run_id: runId, stage: 'signoff', status: 'pending' },
  });
  expect(jsonError(early).recovery).toContain(`yoke deployment-runs watch ${runId}`);
  const stages = await db().selectFrom('deployment_run_stages').selectAll().where('run_id', '=', runId).execute();
  expect(stages).toEqual([]);
  // a stage the flow does not declare is still the usage error naming it
  const unknown = await run(['deployment-runs', 'approve', runId, '--stage', 'no-such-stage', '--json']);
  expect(unknown.code).toBe(2);
  expect(jsonError(unknown)).toMatchObject({
    code: 'stage_not_awaiting_approval',
    details: { stage: 'no-such-stage' },
  });
});

test('issue 2 issue 4: an empty RUN, EXECUTION, SESSION or NAME is a usage error naming the argument, before anything is read or written', async () => {
  const cases: [string[], string][] = [
    [['deployment-runs', 'get', ''], 'RUN'],
    [['deployment-runs', 'watch', ' '], 'RUN'],
    [['deployment-runs', 'terminalize', '', '--disposition', 'cancelled', '--reason', 'r'], 'RUN'],
    [['deployment-runs', 'add-item', '', 'WEB-1'], 'RUN'],
    [['qa', 'get', ''], 'EXECUTION'],
    [['sessions', 'show', ''], 'SESSION'],
    [['test-machine', 'remove', ''], 'NAME'],
    [['test-machine', 'waits', ''], 'NAME'],
    [['actors', 'remove', ''], 'NAME'],
    [['projects', 'grant', '', '--actor', 'driver', '--permission', 'claims.release'], 'NAME'],
  ];
  for (const [args, argument] of cases) {
    const r = await run([...args, '--json']);
    expect({ args, code: r.code }).toEqual({ args, code: 2 });
    const err = jsonError(r);
    expect(err).toMatchObject({ code: 'invalid_argument', details: { argument } });
    expect(err.message).toBe(`${argument}: an empty value names nothing`);
    expect(err.recovery).toContain(`--help`);
    expect(err.recovery).toMatch(new RegExp(`^pass ${argument}[ ,(]`));
    const text = await run(args);
    expect(text.stderr).toContain(`invalid_argument: ${argument}: an empty value names nothing`);
  }
  expect(await db().selectFrom('project_grants').selectAll().execute()).toEqual([]);
  // an optional NAME may also be left out; its help phrase reads as one
  expect(jsonError(await run(['test-machine', 'waits', '', '--json'])).recovery).toBe(
    'pass NAME (only this machine), or leave it out (see yoke test-machine waits --help)',
  );
});

test("issue 2: the base options written before the command (yoke --json CMD, yoke --session S CMD) are the command's own", async () => {
  const listed = await run(['--json', 'projects', 'list']);
  expect(listed.code).toBe(0);
  expect(json(listed)).toEqual([expect.objectContaining({ name: 'web', item_prefix: 'WEB' })]);
  const taken = await run(['--session', 'd1', '--json', 'claims', 'item', 'take', 'WEB-2'], '');
  expect(taken.code).toBe(0);
  expect(json(taken)).toMatchObject({ session_id: 'd1' });
  // an error keeps the JSON shape too
  const refused = await run(['--json', 'deployment-runs', 'get', 'run-0']);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({ code: 'run_not_found' });
});

test('issue 3 issue 5: number options are decimal (0x16 is not port 22, 1e3 is not a 1000-token window): exit 2 naming the option, nothing written', async () => {
  const cases: [string[], string][] = [
    [
      ['test-machine', 'add', 'lab9', '--host', '127.0.0.1', '--port', '0x16', '--user', 'u', '--credential', 'k'],
      '--port',
    ],
    [
      ['test-machine', 'add', 'lab9', '--host', '127.0.0.1', '--port', '-22', '--user', 'u', '--credential', 'k'],
      '--port',
    ],
    [['sessions', 'register', '--session', 'd1', '--window', '1e3'], '--window'],
    [['hooks', 'served-model', '--session', 'd1', '--model', 'm', '--window', '0x10'], '--window'],
    [['coordination-claim', 'acquire', '--key', 'QA_HOST:lab9', '--wait', '--wait-timeout', '1e1'], '--wait-timeout'],
    [['deployment-runs', 'watch', 'run-1', '--timeout', '0x10'], '--timeout'],
    [['deployment-runs', 'watch', 'run-1', '--interval-ms', '1e2'], '--interval-ms'],
    [['qa', 'watch', '1', '--timeout', ' '], '--timeout'],
    [['serve', '--port', '0x10'], '--port'],
  ];
  for (const [args, option] of cases) {
    const r = await run([...args, '--json']);
    expect({ args, code: r.code }).toEqual({ args, code: 2 });
    expect(jsonError(r)).toMatchObject({ code: 'invalid_argument', details: { option } });
    expect(jsonError(r).message).toMatch(
      new RegExp(`^${option}: expected (decimal digits|seconds as a decimal number)`),
    );
  }
  expect(await db().selectFrom('test_machines').selectAll().execute()).toEqual([]);
  const session = await db()
    .selectFrom('sessions')
    .select(['requested_window', 'served_window'])
    .where('session_id', '=', 'd1')
    .executeTakeFirstOrThrow();
  expect(session).toEqual({ requested_window: null, served_window: null });
});

test('issue 4: a run named by its bare number is refused run_not_found with a recovery naming the run-N it likely means', async () => {
  const runId = await createdRun('abcdef5678', ['WEB-1']);
  const n = runId.replace(/^run-/, '');
  const refused = await run(['deployment-runs', 'get', n, '--json']);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({ code: 'run_not_found', details: { run_id: n } });
  expect(jsonError(refused).recovery).toContain(`did you mean ${runId}?`);
  expect(jsonError(refused).recovery).toContain('yoke deployment-runs list');
  // any other unknown id keeps the plain recovery
  expect(jsonError(await run(['deployment-runs', 'get', 'run-0', '--json'])).recovery).toBe(
    'list runs with: yoke deployment-runs list --project P',
  );
});

test('issue 13: projects grant to an actor nothing names yet keeps the grant and warns actor_unknown; a known actor gets no warning', async () => {
  const typo = await run(['projects', 'grant', 'web', '--actor', 'drvier', '--permission', 'claims.release', '--json']);
  expect(typo.code).toBe(0);
  expect(json(typo)).toMatchObject({
    actor_id: 'drvier',
    permission: 'claims.release',
    warnings: [{ code: 'actor_unknown', message: expect.stringContaining('no login role or session is named drvier') }],
  });
  const text = await run(['projects', 'grant', 'web', '--actor', 'drvier', '--permission', 'runs.deploy']);
  expect(text.stdout).toMatch(
    /^granted runs.deploy on web to drvier\nwarning: no login role or session is named drvier/,
  );
  const kept = await db()
    .selectFrom('project_grants')
    .select(['actor_id', 'permission'])
    .where('actor_id', '=', 'drvier')
    .orderBy('permission')
    .execute();
  expect(kept).toEqual([
    { actor_id: 'drvier', permission: 'claims.release' },
    { actor_id: 'drvier', permission: 'runs.deploy' },
  ]);
  // 'driver' has registered sessions: nothing to warn about
  const known = await run([
    'projects',
    'grant',
    'web',
    '--actor',
    'driver',
    '--permission',
    'claims.release',
    '--json',
  ]);
  expect(json(known).warnings).toEqual([]);
});

test('issue 10: deployment-runs watch ends at --timeout even when --interval-ms is longer (it slept a whole interval past it)', async () => {
  const runId = await createdRun('abcdef9999', ['WEB-1']);
  const started = Date.now();
  const r = await run(['deployment-runs', 'watch', runId, '--timeout', '1', '--interval-ms', '60000', '--json']);
  const took = Date.now() - started;
  expect(r.code).toBe(3);
  expect(jsonError(r)).toMatchObject({ code: 'wait_timeout', details: { run_id: runId, status: 'created' } });
  // a bound, not a speed figure: without it the watch returns after its 60 s interval
  expect(took).toBeLessThan(30_000);
});
