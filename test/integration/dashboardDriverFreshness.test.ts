import { sql } from 'kysely';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { sessionActivities } from '../../activities/sessions';
import { listeningDashboard } from '../helpers/dashboard';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { applyWebRelease, walkedRun } from '../helpers/runs';

/**
 * R1 issue 15: the dashboard asks the deployment's driver freshness on every panel read. It read
 * it once, at start, so a worker restarted with another YOKE_DRIVER_FRESH_SECONDS left every
 * runs panel judging drivers by the old value until the dashboard was restarted too.
 */
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t.drop();
});

test('R1 issue 15: the runs panel judges a driver by the freshness in force at each read, not the one at start', async () => {
  await applyWebRelease(t.db);
  await sessionActivities({ db: t.db }).registerSession({ sessionId: 'd1', actorId: 'd1' });
  const runs = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
  const runId = await walkedRun(runs, {
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'a1b2c3d4e5f6',
    idempotencyKey: 'fresh',
    items: [],
  });
  await sql`UPDATE deployment_runs SET driver_heartbeat_at = now() - interval '90 seconds' WHERE run_id = ${runId}`.execute(
    t.db,
  );
  let freshMs = 60_000;
  const app = await listeningDashboard(t.db, () => freshMs);
  const driverLive = async () => {
    const panel = (await (await fetch(app.url('/api/runs'))).json()) as {
      run_id: string;
      driver: { live: boolean } | null;
    }[];
    return panel.find((r) => r.run_id === runId)?.driver?.live;
  };
  expect(await driverLive()).toBe(false); // 90 s old against 60 s
  freshMs = 600_000; // a worker restarted with YOKE_DRIVER_FRESH_SECONDS=600
  expect(await driverLive()).toBe(true);
  await app.close();
});
