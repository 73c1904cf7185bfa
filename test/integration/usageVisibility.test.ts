import { sessionUsageActivities } from '../../activities/usage/sessionUsage';
import { insertFoldRequest, pendingFoldRequests, usageOfSessions, writeUsage } from '../../db/sessionUsage';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, services, type Services } from '../helpers/fixtures';
import { rolePools, sqlActors } from '../helpers/roles';

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

describe('U13 raw SQL', () => {
  const actors = sqlActors(() => t.url);
  const pools = rolePools();
  afterEach(async () => {
    await pools.destroy();
    await actors.end();
  });

  const usageRow = (session_id: string) => ({
    session_id,
    harness: 'claude' as const,
    reader_version: 1,
    status: 'measured' as const,
    totals: JSON.stringify({ 'claude-sonnet-4-5': { input: 10 } }),
    reasons: '[]',
    cost_caveat: null,
    checkpoint: '{}',
  });

  /** reader may read web (project.read) and owns a session in api; plain has no grant and no session. */
  const fourRoles = async () => {
    const roles = [
      await actors.add('reader'),
      await actors.add('plain'),
      await actors.add('boss', 'admin'),
      await actors.add('wrk', 'worker'),
    ] as const;
    await s.grantPermission({ project: 'web', actor: roles[0].name, permission: 'project.read' });
    await s.registerSession({ sessionId: 'api-reader', actorId: roles[0].name, project: 'api', machine: 'm2' });
    return roles;
  };

  test('U13 I13 a role reads session_usage only for sessions it may see, as the CLI shows it; admins and the worker read all', async () => {
    const [reader, plain, boss, worker] = await fourRoles();
    const all = ['api-alice', 'api-carol', 'api-reader', 'loose-dave', 'web-bob'];
    await writeUsage(t.db, all.map(usageRow));

    const read = async (who: typeof reader) =>
      (await who.q<{ session_id: string }>('SELECT session_id FROM session_usage ORDER BY session_id')).map(
        (r) => r.session_id,
      );
    expect(await read(reader)).toEqual(['api-reader', 'loose-dave', 'web-bob']);
    expect(await read(plain)).toEqual(['loose-dave']);
    expect(await read(boss)).toEqual(all);
    expect(await read(worker)).toEqual(all);
    // A join through sessions does not widen it.
    expect(
      await reader.q(
        "SELECT u.totals FROM sessions s JOIN session_usage u USING (session_id) WHERE s.session_id = 'api-carol'",
      ),
    ).toEqual([]);

    // The same rule the CLI applies: what raw SQL reads is what the roster marks visible.
    const visibleInCli = async (who: typeof reader) =>
      (await usageOfSessions(pools.dbOf(who), all))
        .filter((r) => r.visible && r.status !== null)
        .map((r) => r.session_id)
        .sort();
    expect(await visibleInCli(reader)).toEqual(await read(reader));
    expect(await visibleInCli(plain)).toEqual(await read(plain));

    // A fold of your own session still writes (its upsert reads back only its own row).
    await writeUsage(pools.dbOf(reader), [{ ...usageRow('api-reader'), reader_version: 2 }]);
    expect((await reader.q("SELECT reader_version FROM session_usage WHERE session_id = 'api-reader'"))[0]).toEqual({
      reader_version: 2,
    });
  });

  test('U13 U10 a role reads fold requests (their transcript paths) only for sessions it may see; the hook and the worker still work', async () => {
    const [reader, plain, boss, worker] = await fourRoles();
    const others = ['api-alice', 'api-carol', 'loose-dave', 'web-bob'];
    for (const session_id of others) {
      await insertFoldRequest(t.db, { session_id, harness: 'claude', artifacts: [`/home/x/${session_id}.jsonl`] });
    }
    // The hook requests a fold of its own session under its own role, reading the request id back.
    const own = await insertFoldRequest(pools.dbOf(reader), {
      session_id: 'api-reader',
      harness: 'claude',
      artifacts: ['/home/reader/t.jsonl'],
    });
    expect(own).toMatch(/^\d+$/);

    const read = async (who: typeof reader) =>
      (
        await who.q<{ session_id: string }>(
          'SELECT DISTINCT session_id FROM session_usage_fold_requests ORDER BY session_id',
        )
      ).map((r) => r.session_id);
    const all = ['api-alice', 'api-carol', 'api-reader', 'loose-dave', 'web-bob'];
    expect(await read(reader)).toEqual(['api-reader', 'loose-dave', 'web-bob']);
    expect(await read(plain)).toEqual(['loose-dave']);
    expect(await read(boss)).toEqual(all);
    expect(await read(worker)).toEqual(all);
    expect(await plain.q("SELECT artifacts FROM session_usage_fold_requests WHERE session_id = 'api-carol'")).toEqual(
      [],
    );

    // The worker reads the request back and settles it, as the session-usage workflow does.
    const pending = await pendingFoldRequests(pools.dbOf(worker), 'api-reader');
    expect(pending).toEqual([{ request_id: own, harness: 'claude', artifacts: ['/home/reader/t.jsonl'] }]);
    await worker.q('UPDATE session_usage_fold_requests SET done_at = now() WHERE request_id = $1', [own]);
    expect(await pendingFoldRequests(pools.dbOf(reader), 'api-reader')).toEqual([]);
  });
});
