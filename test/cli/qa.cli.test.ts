import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { freePort } from '../../scripts/net';
import {
  executionHostReserved,
  executionState,
  runState,
  runWorkflowId,
  qaExecutionWorkflowId,
} from '../../workflows/definitions';
import { claimActivities } from '../../activities/claims';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { testMachineActivities } from '../../activities/testMachines';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke, type CliResult } from '../helpers/cli';
import { startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startSshHost, type SshHost } from '../helpers/sshd';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { until } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;
let stage: HttpTarget;
let prod: HttpTarget;
let lab: SshHost;
let edge: SshHost;
let env: Record<string, string>;
const run = (args: string[], session = 'd1', extra: Record<string, string> = {}) =>
  yoke(t.url, args, { ...env, YOKE_SESSION_ID: session, ...extra });

const SHA_A = 'a11ce00000000001';
const SHA_B = 'b0b0000000000002';

beforeAll(async () => {
  t = await createTestDatabase();
  // Cases here run until the test lets them finish: a loaded machine must not time them out.
  w = await startTestWorker(t.db, { reservationLifetimeMs: 60_000, commandTimeoutMs: 600_000 });
  [stage, prod, lab, edge] = await Promise.all([
    startHttpTarget(),
    startHttpTarget(),
    startSshHost('lab'),
    startSshHost('edge'),
  ]);
  env = { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: w.taskQueue };
  const dark = `http://127.0.0.1:${await freePort()}`; // nothing listens: the target cannot be asked
  const http = (target: HttpTarget) => ({
    http: { method: 'POST', url: `${target.url}/deploy?sha={{candidate}}`, expect_status: 200 },
  });
  const definition = {
    project: 'shop',
    item_prefix: 'SHOP',
    environments: [
      { name: 'stage', url: stage.url, tier: 'stage' },
      { name: 'production', url: prod.url, tier: 'production' },
      { name: 'dark', url: dark, tier: 'stage', served_revision_path: '/version' },
    ],
    flows: [
      {
        name: 'release',
        delivery_custody: true,
        completion_flow: true,
        stages: [
          { name: 'deploy-stage', kind: 'deploy', target: 'stage', action: http(stage) },
          { name: 'stage-qa', kind: 'qa', target: 'stage', scope: 'run', checks: [{ name: 'smoke', plan: 'shared' }] },
          { name: 'signoff', kind: 'approval', target: 'production' },
          { name: 'deploy-production', kind: 'deploy', target: 'production', action: http(prod) },
        ],
      },
      {
        name: 'dark',
        stages: [{ name: 'dark-qa', kind: 'qa', target: 'dark', scope: 'run', checks: [{ name: 'dark-check' }] }],
      },
    ],
    plans: [
      {
        id: 'shared',
        cases: [
          {
            name: 'suite',
            // Runs until the test lets it finish, so the test decides who holds the machine how long.
            automatic: {
              test_machine: 'lab',
              command: `while [ ! -f ${lab.dir}/go-{{execution_id}} ]; do sleep 0.1; done; echo ran {{commit}}`,
            },
          },
        ],
      },
      {
        id: 'manual',
        gate: { prompt: 'is the lab ready?' },
        cases: [{ name: 'looks-right', manual: { instructions: 'open the checkout page' } }],
      },
      {
        id: 'edge',
        cases: [{ name: 'probe', automatic: { test_machine: 'edge', command: 'exit 3', pass_exit_status: 3 } }],
      },
    ],
    items: [{ id: 'SHOP-1' }, { id: 'SHOP-2' }],
  };
  // Setup in-process (the commands under test run through the binary below).
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(definition) });
  const sessions = sessionActivities({ db: t.db });
  await sessions.registerSession({ sessionId: 'd1', actorId: 'driver', project: 'shop' });
  await sessions.registerSession({ sessionId: 'other', actorId: 'mallory', project: 'shop' });
  await sessions.registerSession({ sessionId: 'op', actorId: 'ops', project: 'shop' });
  for (const s of ['q1', 'q2', 'q3', 'q4', 'q5'])
    await sessions.registerSession({ sessionId: s, actorId: s, project: 'shop' });
  await claimActivities({ db: t.db }).takeSteeringSeat({ sessionId: 'op', project: 'shop' });
  const machines = testMachineActivities({ db: t.db });
  for (const h of [lab, edge])
    await machines.addTestMachine({
      name: h.name,
      host: h.host,
      port: h.port,
      user: h.user,
      credential: h.credential,
      hostKeyFile: h.hostKeyFile,
    });
}, 300_000);

afterAll(async () => {
  await Promise.all([stage.close(), prod.close(), lab.stop(), edge.stop()]);
  await w.shutdown();
  await t.drop();
});

function ok(r: CliResult): CliResult {
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  return r;
}

async function startRun(sha: string, key: string, flow = 'release', target = 'stage') {
  const created = json(
    ok(
      await run([
        'deployment-runs',
        'create',
        '--project',
        'shop',
        '--flow',
        flow,
        '--target',
        target,
        '--candidate',
        sha,
        '--idempotency-key',
        key,
        ...(flow === 'release' ? ['--item', 'SHOP-1', '--item', 'SHOP-2'] : []),
        '--json',
      ]),
    ),
  );
  ok(await run(['deployment-runs', 'execute', created.run_id, '--json']));
  return created.run_id as string;
}

const runSnapshot = (runId: string) => w.client.workflow.getHandle(runWorkflowId(runId)).query(runState);
const waitingFor = (runId: string, what: string) =>
  until(
    () => runSnapshot(runId),
    (s) => s.waitingFor === what,
    `run ${runId} to wait for ${what}`,
  );

async function begin(runId: string, plan: string, session: string, extra: string[] = []) {
  const r = ok(
    await run(['qa', 'begin', '--run', runId, '--stage', 'stage-qa', '--plan', plan, ...extra, '--json'], session),
  );
  return { ...json(r), stderr: r.stderr } as { execution_id: number; stderr: string } & Record<string, any>;
}

const execution = (id: number) =>
  t.db.selectFrom('qa_plan_executions').selectAll().where('execution_id', '=', id).executeTakeFirstOrThrow();
const openWaits = (machine: string) =>
  t.db
    .selectFrom('qa_test_machine_waits')
    .selectAll()
    .where('test_machine', '=', machine)
    .where('state', 'in', ['waiting', 'reserved'])
    .orderBy('queued_at')
    .orderBy('wait_id')
    .execute();
const holding = (id: number) =>
  until(
    () => execution(id),
    (e) => e.held_claim_id !== null,
    `execution ${id} to hold its machine`,
  );
const endedAs = (id: number, status: string) =>
  until(
    () => execution(id),
    (e) => e.status === status,
    `execution ${id} to be ${status}`,
  );
const letFinish = (id: number) => writeFileSync(join(lab.dir, `go-${id}`), '');

let runA: string;
/** A manual execution of runA recorded in-process, its workflow not started (the test starts one, or not). */
const beginUnstarted = () =>
  qaExecutionActivities({ db: t.db }).beginExecution({
    sessionId: 'q1',
    runId: runA,
    stage: 'stage-qa',
    plan: 'manual',
  });

describe('start identity and served revision', () => {
  beforeAll(async () => {
    runA = await startRun(SHA_A, 'run-a');
    await waitingFor(runA, 'qa');
  }, 300_000);

  test('Q1 Q2 qa begin returns the deployment start identity; a target serving the delivered build matches', async () => {
    const e = await begin(runA, 'manual', 'q1');
    expect(e.deployment_start_identity).toEqual({
      target: 'stage',
      target_url: stage.url,
      served_revision_path: '/revision',
      delivered_commit: SHA_A,
    });
    expect(e.served_revision).toMatchObject({ revision_check: 'match', observed_commit: SHA_A });
    expect(e.stderr).not.toContain('warning');
    expect(e.workflow_id).toBe(`qa-plan-execution/${e.execution_id}`);
    const got = json(ok(await run(['qa', 'get', String(e.execution_id), '--json'])));
    expect(got).toMatchObject({ status: 'running', run_id: runA, stage: 'stage-qa', plan_id: 'manual' });
    expect(got.steps.map((s: { name: string; kind: string }) => `${s.kind}:${s.name}`)).toEqual([
      'gate:gate',
      'manual:looks-right',
    ]);
    ok(await run(['qa', 'abort', String(e.execution_id), '--reason', 'done looking'], 'q1'));
  }, 300_000);

  test('I10 qa watch is bounded: --timeout exits 3 wait_timeout; an execution whose workflow is not running exits 3 naming the way out, however short the --timeout', async () => {
    // a live execution waiting for a person: the watch ends at its --timeout, and it goes on
    const live = await begin(runA, 'manual', 'q1');
    const bounded = await run(['qa', 'watch', String(live.execution_id), '--timeout', '1', '--json']);
    expect(bounded.code).toBe(3);
    expect(jsonError(bounded)).toMatchObject({ code: 'wait_timeout', details: { execution_id: live.execution_id } });
    expect(jsonError(bounded).recovery).toContain(`yoke qa watch ${live.execution_id}`);
    ok(await run(['qa', 'abort', String(live.execution_id), '--reason', 'done looking'], 'q1'));
    // An execution recorded without its workflow (begun in-process, nothing started): nothing moves it on.
    const begun = await beginUnstarted();
    const id = String(begun.execution_id);
    for (const timeout of [['--timeout', '1'], []]) {
      const stranded = await run(['qa', 'watch', id, ...timeout, '--json']);
      expect(stranded.code).toBe(3);
      expect(jsonError(stranded)).toMatchObject({
        code: 'execution_workflow_not_running',
        recovery: expect.stringContaining(`yoke qa abort ${id}`),
      });
      expect(jsonError(stranded).message).toContain('does not exist');
    }
    ok(await run(['qa', 'abort', id, '--reason', 'workflow lost'], 'q1'));
  }, 120_000);

  test('issue 11: qa watch says which case awaits a human verdict and how to give it, in text and JSON lines', async () => {
    const e = await begin(runA, 'manual', 'q1');
    const id = String(e.execution_id);
    const text = await run(['qa', 'watch', id, '--timeout', '2']);
    expect(text.code).toBe(3);
    expect(text.stdout).toContain(`awaits a verdict: yoke qa verdict ${id} --case gate --verdict passed|failed`);
    // the gate runs first: a case's verdict before it is refused, nothing recorded
    const early = await run(['qa', 'verdict', id, '--case', 'looks-right', '--verdict', 'passed', '--json'], 'q1');
    expect(early.code).toBe(1);
    expect(jsonError(early)).toMatchObject({
      code: 'qa_step_pending',
      recovery: expect.stringContaining(`yoke qa verdict ${id} --case gate --verdict passed`),
      details: { case: 'looks-right', pending_step: 'gate' },
    });
    expect(json(ok(await run(['qa', 'get', id, '--json']))).steps[1]).toMatchObject({ verdict: null });
    ok(await run(['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed'], 'q1'));
    const lines = (await run(['qa', 'watch', id, '--timeout', '2', '--json'])).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual(expect.objectContaining({ case: 'gate', verdict: 'passed' }));
    expect(lines).toContainEqual({
      execution_id: e.execution_id,
      case: 'looks-right',
      kind: 'manual',
      awaiting: 'verdict',
      recovery: `yoke qa verdict ${id} --case looks-right --verdict passed|failed`,
    });
    ok(await run(['qa', 'abort', id, '--reason', 'seen enough'], 'q1'));
  }, 120_000);

  test('issue 13: a verdict or waiver whose workflow nudge fails is recorded (exit 0) and says so on stderr, naming the re-read that will find it', async () => {
    const begun = await beginUnstarted();
    const id = String(begun.execution_id);
    const down = { TEMPORAL_ADDRESS: '127.0.0.1:9' };
    const verdict = await run(['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed', '--json'], 'q1', down);
    expect(verdict.code).toBe(0);
    // with --json the warning is in the answer; in text it goes to stderr
    expect(json(verdict)).toMatchObject({
      case: 'gate',
      verdict: 'passed',
      warnings: [
        expect.stringMatching(
          new RegExp(
            `^could not signal execution ${id}'s workflow .*the verdict is recorded, and the workflow reads it within 5 minutes by itself$`,
          ),
        ),
      ],
    });
    const waived = await run(['qa', 'waive', id, '--case', 'looks-right', '--reason', 'seen in staging'], 'd1', down);
    expect(waived.code).toBe(0);
    expect(waived.stderr).toContain(`warning: could not signal execution ${id}'s workflow`);
    expect(waived.stderr).toContain('the waiver is recorded');
    const recorded = await t.db
      .selectFrom('qa_plan_execution_results')
      .select(['case_name', 'verdict'])
      .where('execution_id', '=', begun.execution_id)
      .orderBy('ordinal')
      .execute();
    expect(recorded).toEqual([
      { case_name: 'gate', verdict: 'passed' },
      { case_name: 'looks-right', verdict: 'waived' },
    ]);
    ok(await run(['qa', 'abort', id, '--reason', 'nudges tested'], 'q1'));
  }, 120_000);

  test('issue 10: qa watch says once that no worker polls the task queue, as deployment-runs watch does, instead of waiting in silence', async () => {
    const nobody = { YOKE_TASK_QUEUE: 'nobody-polls-qa' };
    const begun = json(
      ok(await run(['qa', 'begin', '--run', runA, '--stage', 'stage-qa', '--plan', 'manual', '--json'], 'q1', nobody)),
    );
    const id = String(begun.execution_id);
    const text = await run(['qa', 'watch', id, '--timeout', '1'], 'q1', nobody);
    expect(text.code).toBe(3);
    const said =
      'no yoke worker has polled task queue "nobody-polls-qa" recently: the execution waits until one runs (npm start)';
    expect(text.stdout.split('\n').filter((l) => l === said)).toHaveLength(1);
    const lines = (await run(['qa', 'watch', id, '--timeout', '1', '--json'], 'q1', nobody)).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual({ execution_id: begun.execution_id, worker: 'none', message: said });
    ok(await run(['qa', 'abort', id, '--reason', 'no worker'], 'q1', nobody));
  }, 120_000);

  test('Q2 a target serving another build is reported on stderr naming both commits; QA proceeds and each case records what it observed', async () => {
    stage.revision = 'feedbeef00000009';
    try {
      const e = await begin(runA, 'manual', 'q1');
      expect(e.stderr).toMatch(/served_revision_mismatch/);
      expect(e.stderr).toContain('feedbeef00000009');
      expect(e.stderr).toContain(SHA_A);
      expect(e.served_revision).toMatchObject({ revision_check: 'mismatch', observed_commit: 'feedbeef00000009' });
      const id = String(e.execution_id);

      // the verdict update's validator refuses by name (nothing is recorded)
      const unknown = await run(['qa', 'verdict', id, '--case', 'nope', '--verdict', 'passed', '--json'], 'q1');
      expect(unknown.code).toBe(1);
      expect(jsonError(unknown).code).toBe('qa_case_not_found');
      const wrongRun = await run(
        ['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed', '--run', 'run-999', '--json'],
        'q1',
      );
      expect(jsonError(wrongRun).code).toBe('qa_execution_wrong_run');

      ok(await run(['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed'], 'q1'));
      stage.revision = 'feedbeef0000000a'; // a newer release took over mid-QA: the case records what it saw
      const v = json(
        ok(
          await run(
            ['qa', 'verdict', id, '--case', 'looks-right', '--verdict', 'passed', '--note', 'fine', '--json'],
            'q1',
          ),
        ),
      );
      expect(v).toMatchObject({
        case: 'looks-right',
        verdict: 'passed',
        observed_commit: 'feedbeef0000000a',
        revision_check: 'mismatch',
      });
      await endedAs(e.execution_id, 'passed');
      const results = await t.db
        .selectFrom('qa_plan_execution_results')
        .selectAll()
        .where('execution_id', '=', e.execution_id)
        .orderBy('ordinal')
        .execute();
      expect(results.map((r) => [r.case_name, r.verdict, r.observed_commit])).toEqual([
        ['gate', 'passed', 'feedbeef00000009'],
        ['looks-right', 'passed', 'feedbeef0000000a'],
      ]);
      const settled = await run(['qa', 'verdict', id, '--case', 'looks-right', '--verdict', 'failed', '--json'], 'q1');
      expect(jsonError(settled).code).toBe('qa_execution_settled');
    } finally {
      stage.revision = undefined;
    }
  }, 300_000);

  test('Q2 a target that cannot be asked is reported unverified', async () => {
    const dark = await startRun('da4c000000000003', 'dark', 'dark', 'dark');
    const r = ok(await run(['qa', 'begin', '--run', dark, '--stage', 'dark-qa', '--plan', 'manual', '--json'], 'q1'));
    const e = json(r);
    expect(e.deployment_start_identity).toMatchObject({ target: 'dark', served_revision_path: '/version' });
    expect(e.served_revision).toMatchObject({ revision_check: 'unverified', observed_commit: null });
    expect(r.stderr).toMatch(/served_revision_unverified/);
    ok(await run(['deployment-runs', 'terminalize', dark, '--disposition', 'cancelled', '--reason', 'done']));
    // O4: the cancelled run aborted its live execution in the status transaction
    expect(await execution(e.execution_id)).toMatchObject({ status: 'aborted', release_reason: 'run_cancelled' });
  }, 300_000);
});

describe('long human waits', () => {
  test('a long human wait continues as new when its history fills: recorded cases carry over and the verdicts land on the new run', async () => {
    // Begun in-process so the workflow can be started with a small history bound (the server's
    // own suggestion comes only after thousands of events, too many for a loaded test machine).
    const begun = await beginUnstarted();
    const e = { execution_id: begun.execution_id };
    await w.client.workflow.start('qaPlanExecution', {
      workflowId: qaExecutionWorkflowId(begun.execution_id),
      taskQueue: w.taskQueue,
      args: [{ executionId: begun.execution_id, runId: begun.run_id, steps: begun.steps, maxHistoryEvents: 120 }],
    });
    const handle = w.client.workflow.getHandle(qaExecutionWorkflowId(begun.execution_id));
    const id = String(e.execution_id);
    ok(await run(['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed'], 'q1'));
    await until(
      () => handle.query(executionState),
      (snap) => snap.step === 'looks-right' && snap.phase === 'waiting_for_verdict',
      'the execution to wait for the manual verdict',
    );
    const firstRun = (await handle.describe()).runId;
    // Every wake-up is a history event: 200 of them pass the bound.
    for (let sent = 0; sent < 200; sent += 20)
      await Promise.all(
        Array.from({ length: 20 }, () => handle.signal(executionHostReserved, { testMachine: 'lab', claimId: 0 })),
      );
    const latest = await until(
      () => handle.describe(),
      (d) => d.runId !== firstRun,
      'the execution to continue as new',
    );
    expect(latest.status.name).toBe('RUNNING');
    expect(await handle.query(executionState)).toMatchObject({ step: 'looks-right', phase: 'waiting_for_verdict' });
    // the gate recorded before stays recorded: the new run refuses it again by name
    const again = await run(['qa', 'verdict', id, '--case', 'gate', '--verdict', 'failed', '--json'], 'q1');
    expect(jsonError(again).code).toBe('qa_case_already_recorded');
    ok(await run(['qa', 'verdict', id, '--case', 'looks-right', '--verdict', 'passed'], 'q1'));
    await endedAs(e.execution_id, 'passed');
    const results = await t.db
      .selectFrom('qa_plan_execution_results')
      .select(['case_name', 'verdict'])
      .where('execution_id', '=', e.execution_id)
      .orderBy('ordinal')
      .execute();
    expect(results).toEqual([
      { case_name: 'gate', verdict: 'passed' },
      { case_name: 'looks-right', verdict: 'passed' },
    ]);
  }, 600_000);
});

describe('R1 authority', () => {
  test('R1 waiving QA needs the live driver or a steering seat; approving needs the same and a reached stage', async () => {
    const e = await begin(runA, 'manual', 'q2');
    const id = String(e.execution_id);
    const refused = await run(['qa', 'waive', id, '--case', 'gate', '--reason', 'meh', '--json'], 'other');
    expect(refused.code).toBe(1);
    expect(jsonError(refused)).toMatchObject({ code: 'run_driven_elsewhere', details: { driver_session_id: 'd1' } });
    ok(await run(['qa', 'waive', id, '--case', 'gate', '--reason', 'lab checked by phone'], 'd1'));
    ok(await run(['qa', 'waive', id, '--case', 'looks-right', '--reason', 'covered by the suite'], 'op')); // steering seat
    await endedAs(e.execution_id, 'passed');

    const early = await run(['deployment-runs', 'approve', runA, '--stage', 'signoff', '--json'], 'd1');
    expect(jsonError(early).code).toBe('approval_stage_not_reached');
    const stranger = await run(['deployment-runs', 'approve', runA, '--stage', 'signoff', '--json'], 'other');
    expect(jsonError(stranger).code).toBe('run_driven_elsewhere');
  }, 300_000);

  test('W9 R1 the actor who began an execution aborts it from another live session of its own once its runner session ended (as it records its verdicts); another actor without the seat is still refused', async () => {
    const sessions = sessionActivities({ db: t.db });
    await sessions.registerSession({ sessionId: 'runner-a', actorId: 'runner', project: 'shop' });
    await sessions.registerSession({ sessionId: 'runner-b', actorId: 'runner', project: 'shop' });
    const e = await begin(runA, 'manual', 'runner-a');
    const id = String(e.execution_id);
    ok(await run(['sessions', 'end', '--session', 'runner-a']));
    const stranger = await run(['qa', 'abort', id, '--reason', 'not mine', '--json'], 'other');
    expect(stranger.code).toBe(1);
    expect(jsonError(stranger).code).toBe('run_driven_elsewhere');
    // runner-b is not the driver and holds no seat; it was refused run_driven_elsewhere
    ok(await run(['qa', 'abort', id, '--reason', 'the runner session ended'], 'runner-b'));
    expect(await execution(e.execution_id)).toMatchObject({ status: 'aborted' });
  }, 300_000);

  test('W9 issue 10: an execution whose place in line was cancelled with its session says so: qa get names the way out, qa watch exits 3 execution_stranded instead of waiting a day', async () => {
    const sessions = sessionActivities({ db: t.db });
    await sessions.registerSession({ sessionId: 'holder-s', actorId: 'holder', project: 'shop' });
    await sessions.registerSession({ sessionId: 'strand-a', actorId: 'strander', project: 'shop' });
    await sessions.registerSession({ sessionId: 'strand-b', actorId: 'strander', project: 'shop' });
    const holder = await begin(runA, 'shared', 'holder-s');
    await holding(holder.execution_id);
    const waiter = await begin(runA, 'shared', 'strand-a');
    const id = String(waiter.execution_id);
    await until(
      () => openWaits('lab'),
      (ws) => ws.some((w) => w.qa_plan_execution_id === waiter.execution_id),
      `execution ${id} in lab's line`,
    );
    ok(await run(['sessions', 'end', '--session', 'strand-a']));

    const watched = await run(['qa', 'watch', id, '--json'], 'strand-b');
    expect(watched.code).toBe(3);
    expect(jsonError(watched)).toMatchObject({
      code: 'execution_stranded',
      details: { execution_id: waiter.execution_id, test_machine: 'lab', cancel_reason: 'session_ended' },
    });
    expect(jsonError(watched).recovery).toContain(`yoke qa abort ${id}`);
    const got = ok(await run(['qa', 'get', id], 'strand-b'));
    expect(got.stdout).toContain(
      "its place in lab's line was cancelled when session strand-a ended: nothing will wake it",
    );
    // the same in JSON, for an agent reading qa get --json
    const gotJson = JSON.parse(ok(await run(['qa', 'get', id, '--json'], 'strand-b')).stdout);
    expect(gotJson.stranded).toEqual({ test_machine: 'lab', recovery: expect.stringContaining(`yoke qa abort ${id}`) });
    ok(await run(['qa', 'abort', id, '--reason', 'stranded'], 'strand-b'));
    expect(JSON.parse(ok(await run(['qa', 'get', id, '--json'], 'strand-b')).stdout).stranded).toBeNull();
    ok(await run(['qa', 'abort', String(holder.execution_id), '--reason', 'done'], 'holder-s'));
  }, 300_000);
});

describe('host turns', () => {
  test('W2 W9 C8 two items, one shared plan, one machine, three executions racing for it (two from the same session): one holds it (a lease under the run project), the others wait in line and are woken in order; aborting the holder serves the next', async () => {
    const e1 = await begin(runA, 'shared', 'q1', ['--item', 'SHOP-1']);
    // stage-qa is run-scoped: an item's execution is begun, told it answers only that item's checks there
    expect(e1.warnings).toEqual([
      `stage stage-qa is run-scoped: this execution answers only SHOP-1's own checks of plan shared there, not the stage's run checks; those are answered by one begun without --item: yoke qa begin --run ${runA} --stage stage-qa --plan shared`,
    ]);
    await holding(e1.execution_id);
    const e2 = await begin(runA, 'shared', 'q2', ['--item', 'SHOP-2']);
    await until(
      () => openWaits('lab'),
      (ws) => ws.length === 1,
      'the second execution to join the line',
    );
    // The same session begins the third: it gets its own place behind its sibling, not the sibling's.
    const e3 = await begin(runA, 'shared', 'q2');
    expect(e3.warnings).toEqual([]);
    const line = await until(
      () => openWaits('lab'),
      (ws) => ws.length === 2,
      'the third execution to join the line',
    );
    expect(line.map((x) => [x.qa_plan_execution_id, x.session_id, x.state])).toEqual([
      [e2.execution_id, 'q2', 'waiting'],
      [e3.execution_id, 'q2', 'waiting'],
    ]);
    for (const e of [e2, e3]) {
      const snapshot = await w.client.workflow.getHandle(qaExecutionWorkflowId(e.execution_id)).query(executionState);
      expect(snapshot.phase).toBe('waiting_for_host');
    }

    const held = (await execution(e1.execution_id)).held_claim_id!;
    ok(await run(['qa', 'abort', String(e1.execution_id), '--reason', 'wrong build'], 'q1'));
    const aborted = await execution(e1.execution_id);
    expect(aborted).toMatchObject({ status: 'aborted', held_claim_id: null, aborted_while_holding: true });
    const claim = await t.db
      .selectFrom('work_claims')
      .selectAll()
      .where('claim_id', '=', held)
      .executeTakeFirstOrThrow();
    expect(claim.released_at).not.toBeNull();
    expect(claim.release_reason).toContain('wrong build');

    await holding(e2.execution_id); // woken by the reservation signal, not by a poll
    expect((await openWaits('lab')).map((x) => x.qa_plan_execution_id)).toEqual([e3.execution_id]);
    // e2's session also began e3, and e3 still waits: it did not re-enter its sibling's lease.
    expect(await execution(e3.execution_id)).toMatchObject({ status: 'running', held_claim_id: null });
    const live = await t.db
      .selectFrom('work_claims')
      .select(['claim_id', 'qa_plan_execution_id', 'project_id'])
      .where('target_kind', '=', 'qa_admission')
      .where('released_at', 'is', null)
      .execute();
    // C8: the lease is recorded as the run's project's, not left to whatever the runner's session names
    const shop = await t.db
      .selectFrom('projects')
      .select('project_id')
      .where('name', '=', 'shop')
      .executeTakeFirstOrThrow();
    expect(live).toEqual([
      {
        claim_id: (await execution(e2.execution_id)).held_claim_id,
        qa_plan_execution_id: e2.execution_id,
        project_id: shop.project_id,
      },
    ]);
    letFinish(e2.execution_id);
    await endedAs(e2.execution_id, 'passed');
    await holding(e3.execution_id);
    letFinish(e3.execution_id);
    await endedAs(e3.execution_id, 'passed');
    const suite = await t.db
      .selectFrom('qa_plan_execution_results')
      .selectAll()
      .where('execution_id', '=', e3.execution_id)
      .executeTakeFirstOrThrow();
    expect(suite).toMatchObject({ verdict: 'passed', exit_code: 0, test_machine: 'lab', observed_commit: SHA_A });
    // the run-scoped execution answered the stage's plan check: the run moves on to its approval
    await waitingFor(runA, 'approval');
  }, 300_000);

  let runB: string;

  test('W6 a shared execution that never held the host takes the place of its predecessor aborted while holding it', async () => {
    runB = await startRun(SHA_B, 'run-b');
    await waitingFor(runB, 'qa');
    const a = await begin(runB, 'shared', 'q1');
    await holding(a.execution_id);
    const leaseAt = (
      await t.db
        .selectFrom('qa_plan_execution_leases')
        .select('claimed_at')
        .where('execution_id', '=', a.execution_id)
        .executeTakeFirstOrThrow()
    ).claimed_at;
    const acquire = (s: string) => run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab', '--json'], s);
    expect((await acquire('q2')).code).toBe(1); // joins the line
    ok(await run(['qa', 'abort', String(a.execution_id), '--reason', 'flaky lab'], 'q1'));
    await until(
      () => openWaits('lab'),
      (ws) => ws.some((x) => x.session_id === 'q2' && x.state === 'reserved'),
      'q2 to be reserved the machine',
    );
    expect((await acquire('q4')).code).toBe(1); // a later waiter
    const b = await begin(runB, 'shared', 'q3');
    const line = await until(
      () => openWaits('lab'),
      (ws) => ws.some((x) => x.qa_plan_execution_id === b.execution_id),
      'b to join',
    );
    const mine = line.find((x) => x.qa_plan_execution_id === b.execution_id)!;
    expect(mine.queued_at.toISOString()).toBe(leaseAt.toISOString());
    expect(line.filter((x) => x.state === 'waiting').map((x) => x.session_id)).toEqual(['q3', 'q4']);
    // clean up: b ends, q4 leaves, q2 gives the machine back
    ok(await run(['qa', 'abort', String(b.execution_id), '--reason', 'done'], 'q3'));
    ok(await run(['sessions', 'end', '--session', 'q4']));
    const reserved = json(ok(await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab', '--json'], 'q2')));
    ok(await run(['claims', 'work', 'release', '--claim-id', String(reserved.claim_id), '--reason', 'done'], 'q2'));
    expect(await openWaits('lab')).toEqual([]);
  }, 300_000);

  test('W3 an SSH failure records a failed verification ssh_unavailable and joins the line; a successful verify wakes the execution', async () => {
    await edge.stop();
    const e = await begin(runB, 'edge', 'q5');
    const check = await until(
      () =>
        t.db.selectFrom('test_machine_checks').selectAll().where('qa_plan_execution_id', '=', e.execution_id).execute(),
      (rows) => rows.length > 0,
      'the failed verification',
    );
    expect(check[0]).toMatchObject({
      test_machine: 'edge',
      kind: 'verification',
      passed: false,
      reason: 'ssh_unavailable',
    });
    const waits = await until(
      () => openWaits('edge'),
      (ws) => ws.length === 1,
      'the execution to join the line',
    );
    expect(waits[0]).toMatchObject({ qa_plan_execution_id: e.execution_id, state: 'waiting', session_id: 'q5' });
    expect(
      await t.db
        .selectFrom('qa_plan_execution_results')
        .selectAll()
        .where('execution_id', '=', e.execution_id)
        .execute(),
    ).toEqual([]);
    expect((await execution(e.execution_id)).status).toBe('running');

    await edge.start();
    ok(await run(['test-machine', 'verify', 'edge'], 'op'));
    await endedAs(e.execution_id, 'passed');
    const result = await t.db
      .selectFrom('qa_plan_execution_results')
      .selectAll()
      .where('execution_id', '=', e.execution_id)
      .executeTakeFirstOrThrow();
    expect(result).toMatchObject({ case_name: 'probe', verdict: 'passed', exit_code: 3 });
  }, 300_000);

  test('O4 W9 terminalizing a run aborts its live executions (run_cancelled), cancels their waits and releases their leases', async () => {
    const holder = await begin(runB, 'shared', 'q1');
    await holding(holder.execution_id);
    const waiter = await begin(runB, 'shared', 'q2');
    await until(
      () => openWaits('lab'),
      (ws) => ws.some((x) => x.qa_plan_execution_id === waiter.execution_id),
      'the waiter to join',
    );
    const claimId = (await execution(holder.execution_id)).held_claim_id!;
    const r = json(
      ok(
        await run([
          'deployment-runs',
          'terminalize',
          runB,
          '--disposition',
          'cancelled',
          '--reason',
          'superseded',
          '--json',
        ]),
      ),
    );
    expect(r.aborted_executions).toEqual([holder.execution_id, waiter.execution_id]);
    for (const id of [holder.execution_id, waiter.execution_id])
      expect(await execution(id)).toMatchObject({ status: 'aborted', release_reason: 'run_cancelled' });
    expect(await openWaits('lab')).toEqual([]);
    const claim = await t.db
      .selectFrom('work_claims')
      .selectAll()
      .where('claim_id', '=', claimId)
      .executeTakeFirstOrThrow();
    expect(claim.released_at).not.toBeNull();
  }, 300_000);
});

describe('blocking QA holds the completing stage', () => {
  test('Q6 a blocking run obligation naming no stage is refused at admission where the flow pins QA stages', async () => {
    const refused = await run(['deployment-runs', 'qa', 'add', runA, '--check', 'late', '--json']);
    expect(refused.code).toBe(1);
    expect(jsonError(refused).code).toBe('blocking_qa_without_stage');
    const rows = await t.db
      .selectFrom('deployment_run_qa')
      .select('check_name')
      .where('run_id', '=', runA)
      .where('check_name', '=', 'late')
      .execute();
    expect(rows).toEqual([]);
    ok(await run(['deployment-runs', 'qa', 'add', runA, '--check', 'fyi', '--non-blocking']));
  }, 300_000);

  test('Q4 Q5 with blocking QA unresolved the last stage does not start; watch and advance exit 5 naming it; settling it advances the run', async () => {
    ok(await run(['deployment-runs', 'qa', 'add', runA, '--check', 'late', '--stage', 'stage-qa']));
    ok(await run(['deployment-runs', 'approve', runA, '--stage', 'signoff']));
    await waitingFor(runA, 'blocking_qa');
    const advance = await run(['deployment-runs', 'advance', runA]);
    expect(advance.code).toBe(5);
    expect(advance.stdout).toContain('run obligation late at stage-qa: pending');
    const watch = await run(['deployment-runs', 'watch', runA]);
    expect(watch.code).toBe(5);
    expect(watch.stdout).toContain('late');
    const pending = json(ok(await run(['deployment-runs', 'qa-pending', runA, '--json'])));
    expect(pending).toMatchObject({ held: true, completing_stage: 'deploy-production', members: [] });
    expect(pending.run_obligations).toEqual([{ check_name: 'late', stage_name: 'stage-qa', status: 'pending' }]);
    const scoped = json(ok(await run(['deployment-runs', 'qa-pending', runA, '--stage', 'stage-qa', '--json'])));
    expect(scoped.run_obligations.map((o: { check_name: string }) => o.check_name)).toEqual(['late']);

    const row = await t.db
      .selectFrom('deployment_runs')
      .selectAll()
      .where('run_id', '=', runA)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'executing', current_stage: 'signoff' });
    const last = await t.db
      .selectFrom('deployment_run_stages')
      .selectAll()
      .where('run_id', '=', runA)
      .where('ordinal', '=', 3)
      .executeTakeFirstOrThrow();
    expect(last.status).toBe('pending');
    const started = await t.db
      .selectFrom('events')
      .select('payload')
      .where('event_type', '=', 'DeploymentRunStageStarted')
      .execute();
    expect(
      started.filter(
        (e) =>
          (e.payload as { run_id: string; stage: string }).run_id === runA &&
          (e.payload as { stage: string }).stage === 'deploy-production',
      ),
    ).toEqual([]);
    expect(prod.deploys).not.toContain(SHA_A);

    ok(await run(['deployment-runs', 'qa-verdict', runA, '--check', 'late', '--status', 'passed']));
    await until(
      () => t.db.selectFrom('deployment_runs').select('status').where('run_id', '=', runA).executeTakeFirstOrThrow(),
      (r) => r.status === 'succeeded',
      'the run to advance by itself and succeed',
    );
    expect(prod.deploys).toContain(SHA_A);
  }, 300_000);

  test('Q5 a blocking-QA read past its deadline is retried, then says could not evaluate blocking QA and exits 1', async () => {
    const locker = new Client({ connectionString: t.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE deployment_run_qa IN ACCESS EXCLUSIVE MODE');
      const r = await run(['deployment-runs', 'qa-pending', runA, '--json'], 'd1', { YOKE_QA_READ_DEADLINE_MS: '150' });
      expect(r.code).toBe(1);
      const error = jsonError(r);
      expect(error.code).toBe('read_deadline_exceeded');
      expect(error.message).toContain('could not evaluate blocking QA');
      expect(error.details.attempts).toBe(4);
      expect(error.recovery).toContain(`yoke deployment-runs qa-pending ${runA}`);
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
  }, 300_000);
});
