import { sessionUsageActivities } from '../../activities/usage/sessionUsage';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, services, type Services } from '../helpers/fixtures';

let t: TestDatabase;
let s: Services;

beforeEach(async () => {
  t = await createTestDatabase();
  s = services(t.db);
  await s.createProject({ name: 'web', itemPrefix: 'WEB' });
  await s.createProject({ name: 'api', itemPrefix: 'API' });
  await s.grantPermission({ project: 'web', actor: 'alice', permission: 'project.read' });
  await s.registerSession({ sessionId: 'viewer', actorId: 'alice' });
  await s.registerSession({ sessionId: 'web-bob', actorId: 'bob', project: 'web', machine: 'm1' });
  await s.registerSession({ sessionId: 'api-carol', actorId: 'carol', project: 'api', machine: 'm2' });
  await s.registerSession({ sessionId: 'api-alice', actorId: 'alice', project: 'api', machine: 'm2' });
  await s.registerSession({ sessionId: 'loose-dave', actorId: 'dave', machine: 'm3' });
});
afterEach(async () => {
  await t.drop();
});

test('U13 a session sees the 24-hour cohort only for projects its actor may read, its own sessions, and project-less ones', async () => {
  const u = sessionUsageActivities({ db: t.db });
  const ids = async (viewer?: { sessionId: string }) => (await u.last24hCohort(viewer)).map((c) => c.session_id).sort();
  expect(await ids()).toEqual(['api-alice', 'api-carol', 'loose-dave', 'web-bob']);
  expect(await ids({ sessionId: 'viewer' })).toEqual(['api-alice', 'loose-dave', 'web-bob']);
  // A grant of any permission on api makes it readable.
  await s.grantPermission({ project: 'api', actor: 'alice', permission: 'claims.release' });
  expect(await ids({ sessionId: 'viewer' })).toEqual(['api-alice', 'api-carol', 'loose-dave', 'web-bob']);
});

test('U13 machines usage sums only visible sessions per machine; an unknown viewer is refused', async () => {
  const u = sessionUsageActivities({ db: t.db });
  const sessions = (rows: Awaited<ReturnType<typeof u.machinesUsage>>) =>
    Object.fromEntries(rows.map((r) => [r.machine_id, r['24H SESSIONS']]));
  expect(sessions(await u.machinesUsage())).toEqual({ m1: 1, m2: 2, m3: 1 });
  expect(sessions(await u.machinesUsage({ sessionId: 'viewer' }))).toEqual({ m1: 1, m2: 1, m3: 1 });
  expect(sessions(await u.machinesUsage({ sessionId: 'web-bob' }))).toEqual({ m1: 1, m3: 1 });
  expect((await refusalOf(u.machinesUsage({ sessionId: 'nobody' }))).code).toBe('session_not_registered');
});
