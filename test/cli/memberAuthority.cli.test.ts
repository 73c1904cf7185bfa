import { mkdtempSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { ARTIFACT_MAX_BYTES } from '../../domain/artifacts';
import { json, jsonError, yoke, type CliResult } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { releaseDefinition, writeDefinition } from '../helpers/runs';

/**
 * C10 through the built binary: `items requirements ITEM --run RUN` and `deployment-runs
 * artifacts upload|list` act under the stored member's project, before and after the
 * membership ends; a run the item never joined exits 1 run_member_unknown.
 */
let t: TestDatabase;
let r: DeploymentRunActivities;
const dir = mkdtempSync(join(tmpdir(), 'yoke-artifacts-'));
const run = (args: string[], session = 'q1'): Promise<CliResult> =>
  yoke(t.url, args, { YOKE_SESSION_ID: session, TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS! });

beforeAll(async () => {
  t = await createTestDatabase();
  const apply = (def: object) =>
    projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(def) });
  await apply(
    releaseDefinition({
      project: 'web',
      prefix: 'WEB',
      stageUrl: 'http://stage.example.test',
      prodUrl: 'https://web.example.test',
    }),
  );
  await apply({ project: 'api', item_prefix: 'API' });
  const sessions = sessionActivities({ db: t.db });
  await sessions.registerSession({ sessionId: 'd1', actorId: 'driver', project: 'web' });
  await sessions.registerSession({ sessionId: 'q1', actorId: 'qa', project: 'api' });
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 3_600_000 });
}, 120_000);
afterAll(async () => t.drop());

test('C10 artifacts upload and items requirements --run keep the stored member project after remove-item; a never-member and an oversized file are refused', async () => {
  const { run_id: runId } = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'c0ffee0000000001',
    idempotencyKey: 'c10',
    items: ['WEB-1', 'WEB-2'],
  });
  const file = join(dir, 'screenshot.png');
  writeFileSync(file, 'not really a png');

  const up = await run(['deployment-runs', 'artifacts', 'upload', runId, '--item', 'WEB-1', '--file', file, '--json']);
  expect(up.code).toBe(0);
  expect(json(up)).toMatchObject({
    replayed: false,
    artifact: { item: 'WEB-1', project: 'web', name: 'screenshot.png', size_bytes: 16 },
    membership: { ended: false },
  });

  await r.removeItem({ sessionId: 'd1', runId, item: 'WEB-1', reason: 'next release' });
  const later = await run([
    'deployment-runs',
    'artifacts',
    'upload',
    runId,
    '--item',
    'WEB-1',
    '--file',
    file,
    '--name',
    'after.png',
  ]);
  expect(later.code).toBe(0);
  expect(later.stdout).toContain('under project web (membership ended: removed)');

  const read = await run(['items', 'requirements', 'WEB-1', '--run', runId, '--json']);
  expect(read.code).toBe(0);
  expect(json(read)).toMatchObject({
    project: 'web',
    membership: { ended: true, ended_by: 'removed' },
    requirement_selection: ['WEB-1/checkout-e2e'],
  });
  const human = await run(['items', 'requirements', 'WEB-1', '--run', runId]);
  expect(human.stdout).toContain(`membership ended: removed; read under project web`);
  expect(human.stdout).toMatch(/WEB-1\/checkout-e2e\s+post_deploy\s+stage/);

  const list = await run(['deployment-runs', 'artifacts', 'list', runId, '--json']);
  expect(json(list).map((a: { name: string; project: string }) => [a.name, a.project])).toEqual([
    ['screenshot.png', 'web'],
    ['after.png', 'web'],
  ]);

  const never = await run([
    'deployment-runs',
    'artifacts',
    'upload',
    runId,
    '--item',
    'WEB-3',
    '--file',
    file,
    '--json',
  ]);
  expect(never.code).toBe(1);
  expect(jsonError(never)).toMatchObject({ code: 'run_member_unknown', details: { item: 'WEB-3', run_id: runId } });
  const neverRead = await run(['items', 'requirements', 'WEB-3', '--run', runId, '--json']);
  expect([neverRead.code, jsonError(neverRead).code]).toEqual([1, 'run_member_unknown']);

  const big = join(dir, 'big.bin');
  writeFileSync(big, '');
  truncateSync(big, ARTIFACT_MAX_BYTES + 1);
  const tooBig = await run([
    'deployment-runs',
    'artifacts',
    'upload',
    runId,
    '--item',
    'WEB-2',
    '--file',
    big,
    '--json',
  ]);
  expect(tooBig.code).toBe(1);
  expect(jsonError(tooBig)).toMatchObject({ code: 'artifact_too_large', details: { max_bytes: ARTIFACT_MAX_BYTES } });
  const missing = await run([
    'deployment-runs',
    'artifacts',
    'upload',
    runId,
    '--item',
    'WEB-2',
    '--file',
    dir,
    '--json',
  ]);
  expect([missing.code, jsonError(missing).code]).toEqual([2, 'artifact_file_unreadable']);
  expect(json(await run(['deployment-runs', 'artifacts', 'list', runId, '--json']))).toHaveLength(2);
});
