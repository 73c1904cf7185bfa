import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { ageSession, seedLab, services } from '../helpers/fixtures';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { ensureSweepSchedule } from '../../temporal/schedules';
import type { SweepResult } from '../../activities/sweep';
import { until } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
});
afterAll(async () => {
  await w.shutdown();
  await t.drop();
});

/** Waits for the schedule's next started workflow and returns its result. */
async function nextSweep(scheduleId: string, after: number): Promise<SweepResult & { reattached_runs: string[] }> {
  const handle = w.client.schedule.getHandle(scheduleId);
  const { info } = await until(
    () => handle.describe(),
    (d) => d.info.recentActions.length > after,
    `schedule ${scheduleId} to start a workflow`,
  );
  const action = info.recentActions[info.recentActions.length - 1]!.action;
  return w.client.workflow.getHandle(action.workflow.workflowId).result();
}

test('C5 the stale-session sweep runs as a Temporal Schedule and reclaims only non-sticky claims', async () => {
  const s = services(t.db);
  await seedLab(s);
  const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
  const mig = await s.acquireCoordinationClaim({
    sessionId: 'w1',
    key: 'LIVE_DB_MIGRATION:orders',
    project: 'web',
    item: 'WEB-1',
  });
  const grant = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'ROUTE_QUALIFICATION:beta', project: 'web' });
  await ageSession(t.db, 'w1', 3600);

  const scheduleId = `sweep-${w.taskQueue}`;
  const options = { scheduleId, taskQueue: w.taskQueue, intervalMs: 3_600_000, staleAfterMs: 60_000 };
  await ensureSweepSchedule(w.client, options);
  await ensureSweepSchedule(w.client, options); // idempotent: an existing schedule is updated, not duplicated
  try {
    await w.client.schedule.getHandle(scheduleId).trigger();
    const result = await nextSweep(scheduleId, 0);
    expect(result).toEqual({
      terminated_sessions: ['w1'],
      released_claim_ids: [grant.claim.claim_id],
      expired_reservation_claim_ids: [],
      reattached_runs: [],
    });
    const live = await s.listCoordinationClaims({ activeOnly: true });
    expect(live.map((c) => c.claim_id).sort()).toEqual([qa.claim.claim_id, mig.claim.claim_id].sort());
  } finally {
    await w.client.schedule.getHandle(scheduleId).delete();
  }
});
