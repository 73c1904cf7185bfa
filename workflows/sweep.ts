import { proxyActivities } from '@temporalio/workflow';
import type { SweepActivities } from '../activities/sweep';

const { sweepStaleSessions } = proxyActivities<SweepActivities>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 5 },
});

/**
 * C5: the stale-session sweep, started by a Temporal Schedule. It releases only non-sticky
 * claims; migration and QA host holds wait for their audited operator release.
 */
export async function staleSessionSweep(input: { staleAfterMs: number }) {
  return sweepStaleSessions(input);
}
