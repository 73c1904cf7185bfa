import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { memberAuthorityActivities, type MemberAuthorityActivities } from '../../activities/memberAuthority';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionActivities } from '../../activities/sessions';
import { ARTIFACT_MAX_BYTES } from '../../domain/artifacts';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf } from '../helpers/fixtures';
import { createTestRepository, type TestRepository } from '../helpers/git';
import { refusalOf as sqlRefusalOf, sqlActors } from '../helpers/roles';
import { releaseDefinition, releaseRuns, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';

/**
 * C10: requirement reads and artifact uploads by a run member act under the project stored on
 * its membership, and keep it after the membership ends: removed, moved by a takeover, or the
 * run terminal. A run the item never belonged to is refused run_member_unknown.
 */
let t: TestDatabase;
let r: DeploymentRunActivities;
let m: MemberAuthorityActivities;
let repo: TestRepository;
let stage: HttpTarget;

beforeAll(async () => {
  repo = createTestRepository();
  stage = await startHttpTarget();
});
afterAll(async () => {
  await stage.close();
});

beforeEach(async () => {
  t = await createTestDatabase();
  const apply = (def: object) =>
    projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: writeDefinition(def) });
  await apply({
    ...releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: stage.url, prodUrl: 'https://web.example.test' }),
    repository: repo.dir,
  });
  await apply({ project: 'api', item_prefix: 'API', items: [{ id: 'API-1' }] });
  const sessions = sessionActivities({ db: t.db });
  await sessions.registerSession({ sessionId: 'd1', actorId: 'd1', project: 'web' });
  // the QA runner's session has since moved to another project: its authority is the member's
  await sessions.registerSession({ sessionId: 'q1', actorId: 'q1', project: 'api' });
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000, takeoverLockTimeoutMs: 5_000 });
  m = memberAuthorityActivities({ db: t.db });
});
afterEach(async () => {
  await t.drop();
});

const { createdRun, waitingRun } = releaseRuns(() => r);

const upload = (runId: string, item: string, name = 'report.txt', text = `report for ${item}`) =>
  m.uploadArtifact({ sessionId: 'q1', runId, item, name, content: Buffer.from(text) });

test('C10 an artifact upload after remove-item keeps the stored member project, as does the requirement read', async () => {
  const runId = await createdRun(repo.A, ['WEB-1', 'WEB-2']);
  const during = await upload(runId, 'WEB-1');
  expect(during).toMatchObject({
    replayed: false,
    membership: { run_id: runId, project: 'web', ended: false, ended_by: null },
    artifact: { item: 'WEB-1', project: 'web', name: 'report.txt', size_bytes: 16 },
  });
  expect(during.artifact.sha256).toBe(createHash('sha256').update('report for WEB-1').digest('hex'));

  await r.removeItem({ sessionId: 'd1', runId, item: 'WEB-1', reason: 'next release' });
  const after = await upload(runId, 'WEB-1', 'trace.log', 'after removal');
  expect(after).toMatchObject({
    replayed: false,
    membership: { project: 'web', ended: true, ended_by: 'removed' },
    artifact: { item: 'WEB-1', project: 'web', name: 'trace.log' },
  });
  // the requirement read through the ended membership: its project and the selection it had
  const read = await m.readRequirements({ item: 'WEB-1', runId });
  expect(read).toMatchObject({
    item: 'WEB-1',
    project: 'web',
    run_id: runId,
    membership: { ended: true, ended_by: 'removed' },
    requirement_selection: ['WEB-1/checkout-e2e'],
  });
  expect(read.requirements.find((x) => x.case === 'checkout-e2e')).toMatchObject({ selected: true });
  expect(read.requirements.find((x) => x.case === 'unit')).toMatchObject({ qa_phase: 'pre_merge', selected: false });
  expect((await m.listArtifacts({ runId })).map((a) => [a.item, a.name, a.project])).toEqual([
    ['WEB-1', 'report.txt', 'web'],
    ['WEB-1', 'trace.log', 'web'],
  ]);
});

test('C10 after a takeover moved the member, uploads and reads naming the predecessor keep its stored member', async () => {
  const pred = await waitingRun(repo.A, ['WEB-1']);
  const succ = await createdRun(repo.C, []);
  await r.takeoverRun({ sessionId: 'd1', runId: pred, successorRunId: succ });
  const old = await upload(pred, 'WEB-1', 'evidence.txt');
  expect(old).toMatchObject({
    membership: { run_id: pred, project: 'web', ended: true, ended_by: 'superseded', later_run_id: succ },
    artifact: { run_id: pred, project: 'web' },
  });
  expect(await m.readRequirements({ item: 'WEB-1', runId: pred })).toMatchObject({
    project: 'web',
    membership: { ended_by: 'superseded', later_run_id: succ },
  });
  // the successor's membership is the live one, with the same stored project
  expect(await upload(succ, 'WEB-1', 'evidence.txt')).toMatchObject({
    membership: { run_id: succ, project: 'web', ended: false },
  });
});

test('C10 a terminal run keeps its members authority; a run the item never joined is refused run_member_unknown', async () => {
  const runId = await createdRun(repo.A, ['WEB-1']);
  await r.terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'not this week' });
  expect(await upload(runId, 'WEB-1')).toMatchObject({
    membership: { ended: true, ended_by: 'run_terminal', run_status: 'cancelled' },
    artifact: { project: 'web' },
  });
  expect(await m.readRequirements({ item: 'WEB-1', runId })).toMatchObject({ membership: { run_status: 'cancelled' } });

  const never = await refusalOf(upload(runId, 'WEB-2'));
  expect(never).toMatchObject({ code: 'run_member_unknown', details: { run_id: runId, item: 'WEB-2' } });
  expect(never.message).toContain('WEB-2');
  // C10: a terminal run takes no new member, so its recovery does not offer add-item
  expect(never.recovery).toBe('name a run WEB-2 is or was a member of (yoke items get WEB-2)');
  expect((await refusalOf(m.readRequirements({ item: 'WEB-2', runId }))).code).toBe('run_member_unknown');
  expect((await refusalOf(upload('no-such-run', 'WEB-1'))).code).toBe('run_not_found');
  expect((await m.listArtifacts({ runId })).map((a) => a.item)).toEqual(['WEB-1']);
});

test('C10 uploads are bounded, named files; the same content under the same name is stored once', async () => {
  const runId = await createdRun(repo.A, ['WEB-1']);
  const first = await upload(runId, 'WEB-1');
  const again = await upload(runId, 'WEB-1');
  expect(again).toMatchObject({ replayed: true, artifact: { artifact_id: first.artifact.artifact_id } });
  const big = await refusalOf(
    m.uploadArtifact({
      sessionId: 'q1',
      runId,
      item: 'WEB-1',
      name: 'huge.bin',
      content: Buffer.alloc(ARTIFACT_MAX_BYTES + 1),
    }),
  );
  expect(big).toMatchObject({ code: 'artifact_too_large', details: { max_bytes: ARTIFACT_MAX_BYTES } });
  expect((await refusalOf(upload(runId, 'WEB-1', '../etc/passwd'))).code).toBe('invalid_artifact_name');
  expect(await m.listArtifacts({ runId })).toHaveLength(1);
});

describe('C10 in the database (row-level security), each actor connected as its own role', () => {
  const actors = sqlActors(() => t.url);
  afterEach(async () => actors.end());

  test("a user's upload is filed under the stored member's project whatever it says, with its own session only, and never changed", async () => {
    const runId = await createdRun(repo.A, ['WEB-1']);
    await r.removeItem({ sessionId: 'd1', runId, item: 'WEB-1', reason: 'moved on' });
    const qa = await actors.add('qa');
    await sessionActivities({ db: t.db }).registerSession({ sessionId: 'qa-s', actorId: qa.name, project: 'api' });
    const itemId = Number(
      (
        await sql<{
          id: number;
        }>`SELECT item_id AS id FROM backlog_items WHERE number = 1 AND project_id = (SELECT project_id FROM projects WHERE name = 'web')`.execute(
          t.db,
        )
      ).rows[0]!.id,
    );
    const api = (await sql<{ id: number }>`SELECT project_id AS id FROM projects WHERE name = 'api'`.execute(t.db))
      .rows[0]!.id;
    const [row] = await qa.q<{ project_id: number; actor_id: string; size_bytes: number }>(
      `INSERT INTO deployment_run_member_artifacts (run_id, item_id, project_id, name, content, uploaded_by_session_id)
       VALUES ($1, $2, $3, 'a.txt', 'hello', 'qa-s') RETURNING project_id, actor_id, size_bytes`,
      [runId, itemId, api],
    );
    const web = (await sql<{ id: number }>`SELECT project_id AS id FROM projects WHERE name = 'web'`.execute(t.db))
      .rows[0]!.id;
    expect(row).toEqual({ project_id: web, actor_id: qa.name, size_bytes: 5 });
    expect(
      await sqlRefusalOf(
        qa.q(
          `INSERT INTO deployment_run_member_artifacts (run_id, item_id, name, content, uploaded_by_session_id)
           VALUES ($1, $2, 'b.txt', 'x', 'd1')`,
          [runId, itemId],
        ),
      ),
    ).toBe('permission_denied');
    expect(await sqlRefusalOf(qa.q(`UPDATE deployment_run_member_artifacts SET name = 'c.txt'`))).toBe(
      'permission_denied',
    );
    expect(await sqlRefusalOf(qa.q(`DELETE FROM deployment_run_member_artifacts`))).toBe('permission_denied');
    const other = (await sql<{ id: number }>`SELECT item_id AS id FROM backlog_items WHERE number = 2`.execute(t.db))
      .rows[0]!.id;
    expect(
      await sqlRefusalOf(
        qa.q(
          `INSERT INTO deployment_run_member_artifacts (run_id, item_id, name, content, uploaded_by_session_id)
           VALUES ($1, $2, 'c.txt', 'x', 'qa-s')`,
          [runId, other],
        ),
      ),
    ).toBe('run_member_unknown');
    // membership records are written only through member rows, under the run's rule
    expect(
      await sqlRefusalOf(
        qa.q(`INSERT INTO deployment_run_memberships (run_id, item_id, project_id) VALUES ($1, $2, $3)`, [
          runId,
          other,
          api,
        ]),
      ),
    ).toBe('permission_denied');
  });
});
