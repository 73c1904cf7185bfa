import { proxyActivities } from '@temporalio/workflow';
import type { RunWorkflowActivities } from '../activities/runs/runWorkflows';
import type { SweepActivities } from '../activities/sweep';

const { sweepStaleSessions, reattachStrandedRuns } = proxyActivities<
  SweepActivities & Pick<RunWorkflowActivities, 'reattachStrandedRuns'>
>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 5 },
});

/**
 * C5: the stale-session sweep, started by a Temporal Schedule. It releases only non-sticky
 * claims; migration and QA host holds wait for their audited operator release. Then the
 * reconciler: every executing run whose workflow is not running gets one, so no run strands.
 */
export async function staleSessionSweep(input: { staleAfterMs: number }) {
  const swept = await sweepStaleSessions(input);
  const { reattached } = await reattachStrandedRuns();
  return { ...swept, reattached_runs: reattached.map((r) => r.run_id) };
}
