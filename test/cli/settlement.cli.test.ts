import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke, type CliResult } from '../helpers/cli';
import { releaseDefinition, writeDefinition } from '../helpers/runs';

/**
 * The settlement and item commands through the built binary: items get|list|update, the
 * explicit settlement replay (deployment-runs update RUN status succeeded, S5) and
 * deployment-runs validate (D9). Runs are walked in-process; the commands under test run as a
 * user runs them.
 */
let t: TestDatabase;
let r: DeploymentRunActivities;
const env = () => ({ TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: 'settlement-cli' });
const run = (args: string[], session = 'd1'): Promise<CliResult> =>
  yoke(t.url, args, { ...env(), YOKE_SESSION_ID: session });

beforeAll(async () => {
  t = await createTestDatabase();
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition(
      releaseDefinition({
        project: 'web',
        prefix: 'WEB',
        stageUrl: 'http://stage.example.test',
        prodUrl: 'https://web.example.test',
      }),
    ),
  });
  const sessions = sessionActivities({ db: t.db });
  await sessions.registerSession({ sessionId: 'd1', actorId: 'driver', project: 'web' });
  await sessions.registerSession({ sessionId: 'd2', actorId: 'other', project: 'web' });
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 3_600_000 });
}, 120_000);

afterAll(async () => t.drop());

/** A release run of the members, executed and walked through every stage. */
async function walkedRun(members: string[], key: string): Promise<string> {
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'c0ffee0000000001',
    idempotencyKey: key,
    items: members,
  });
  await r.executeRun({ sessionId: 'd1', runId: created.run_id });
  for (const stage of (await r.loadRunPlan({ runId: created.run_id })).stages) {
    await r.beginStage({ runId: created.run_id, ordinal: stage.ordinal, walk: 1 });
    await r.finishStage({
      runId: created.run_id,
      ordinal: stage.ordinal,
      walk: 1,
      result: { ok: true, detail: 'cli' },
    });
  }
  return created.run_id;
}

test('items get, list and update show and set status, delivery evidence and completion runs; bad input exits 2 naming it', async () => {
  const got = await run(['items', 'get', 'WEB-3', '--json']);
  expect(got.code).toBe(0);
  expect(json(got)).toMatchObject({ item: 'WEB-3', status: 'open', completion_runs: [], completed_deliveries: [] });
  expect((await run(['items', 'get', 'WEB-3'])).stdout).toContain('WEB-3');

  const listed = json(await run(['items', 'list', '--project', 'web', '--json']));
  expect(listed.map((i: { item: string; status: string }) => [i.item, i.status])).toEqual([
    ['WEB-1', 'open'],
    ['WEB-2', 'open'],
    ['WEB-3', 'open'],
  ]);

  const updated = await run(['items', 'update', 'WEB-3', 'status', 'in_progress', '--json']);
  expect(updated.code).toBe(0);
  expect(json(updated)).toMatchObject({ item: 'WEB-3', status: 'in_progress' });
  expect(json(await run(['items', 'list', '--status', 'in_progress', '--json']))).toEqual([
    expect.objectContaining({ item: 'WEB-3', status: 'in_progress' }),
  ]);
  const table = await run(['items', 'list', '--project', 'web']);
  expect(table.stdout).toMatch(/WEB-3\s+web\s+in_progress/);

  const badStatus = await run(['items', 'update', 'WEB-3', 'status', 'finished', '--json']);
  expect(badStatus.code).toBe(2);
  expect(jsonError(badStatus).code).toBe('invalid_item_status');
  const badField = await run(['items', 'update', 'WEB-3', 'colour', 'red', '--json']);
  expect(badField.code).toBe(2);
  expect(jsonError(badField).code).toBe('unknown_item_field');
  // done needs a completion run that delivered it: refused, nothing written
  const early = await run(['items', 'update', 'WEB-3', 'status', 'done', '--json']);
  expect(early.code).toBe(1);
  expect(jsonError(early).code).toBe('done_gate_refused');
  expect(json(await run(['items', 'get', 'WEB-3', '--json'])).status).toBe('in_progress');
}, 120_000);

test('S5 deployment-runs update RUN status succeeded is the explicit replay: refuses run_settlement_blocked naming the member, then settles once the blocker is answered', async () => {
  const runId = await walkedRun(['WEB-1', 'WEB-2'], 'cli-settle');
  for (const checkName of ['smoke-test', 'WEB-2/gift-smoke'])
    await r.recordQaVerdict({ sessionId: 'd1', runId, checkName, status: 'passed' });

  const blocked = await run(['deployment-runs', 'update', runId, 'status', 'succeeded', '--json']);
  expect(blocked.code).toBe(1);
  const err = jsonError(blocked);
  expect(err.code).toBe('run_settlement_blocked');
  expect(err.message).toContain('WEB-1');
  expect(err.details).toMatchObject({ blocked: [expect.objectContaining({ item: 'WEB-1' })], held: ['WEB-2'] });
  expect(json(await run(['items', 'get', 'WEB-2', '--json'])).status).not.toBe('done'); // the set rolled back
  // S1 issue 12: `get` names the settling phase and the block, as watch and YokeRunStatus do
  const shown = await run(['deployment-runs', 'get', runId]);
  expect(shown.stdout).toMatch(/^status executing \(settling since \d{4}-\d\d-\d\dT[^)]+\)$/m);
  expect(shown.stdout).toContain(`settlement blocked: ${err.message}`);
  expect(shown.stdout).toContain(`  recovery: ${err.recovery}`);
  const listed = json(await run(['deployment-runs', 'list', '--project', 'web', '--json']));
  expect(listed.find((x: { run_id: string }) => x.run_id === runId)).toMatchObject({
    status: 'executing',
    settling: true,
  });
  expect((await run(['deployment-runs', 'list', '--project', 'web'])).stdout).toMatch(
    new RegExp(`^${runId}\\s.*\\sexecuting \\(settling\\)\\s`, 'm'),
  );

  const stranger = await run(['deployment-runs', 'update', runId, 'status', 'succeeded', '--json'], 'd2');
  expect(jsonError(stranger).code).toBe('run_driven_elsewhere');
  const unsupported = await run(['deployment-runs', 'update', runId, 'status', 'failed', '--json']);
  expect(unsupported.code).toBe(2);
  expect(jsonError(unsupported).code).toBe('unsupported_run_update');

  await r.recordQaVerdict({ sessionId: 'd1', runId, checkName: 'WEB-1/checkout-e2e', status: 'passed' });
  const settled = await run(['deployment-runs', 'update', runId, 'status', 'succeeded', '--json']);
  expect(settled.code).toBe(0);
  expect(json(settled)).toMatchObject({
    run_id: runId,
    status: 'succeeded',
    replayed: false,
    commit: { closed: ['WEB-1', 'WEB-2'] },
  });
  const after = (await run(['deployment-runs', 'get', runId])).stdout;
  expect(after).toMatch(/^status succeeded$/m);
  expect(after).not.toContain('settlement blocked');
  expect(json(await run(['deployment-runs', 'list', '--project', 'web', '--json']))[0]).toMatchObject({
    run_id: runId,
    status: 'succeeded',
    settling: false,
  });
  const again = await run(['deployment-runs', 'update', runId, 'status', 'succeeded', '--json']);
  expect(json(again)).toMatchObject({ status: 'succeeded', replayed: true });
  const web1 = json(await run(['items', 'get', 'WEB-1', '--json']));
  expect(web1).toMatchObject({ status: 'done', completion_run: runId });
  expect(web1.completed_deliveries).toEqual([expect.objectContaining({ run: runId, member: 'WEB-1' })]);
}, 120_000);

test('D9 deployment-runs validate answers a valid composition and names an unknown run', async () => {
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'preview-a',
    target: 'preview-a',
    candidate: 'c0ffee0000000002',
    idempotencyKey: 'cli-validate',
    items: [],
  });
  const valid = await run(['deployment-runs', 'validate', created.run_id, '--json']);
  expect(valid.code).toBe(0);
  expect(json(valid)).toMatchObject({ run_id: created.run_id, valid: true });
  expect((await run(['deployment-runs', 'validate', created.run_id])).stdout).toContain('composition valid');
  const unknown = await run(['deployment-runs', 'validate', 'run-999999', '--json']);
  expect(unknown.code).toBe(1);
  expect(jsonError(unknown).code).toBe('run_not_found');
}, 120_000);
