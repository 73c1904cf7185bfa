import type { Duration } from '@temporalio/common';
import { proxyActivities, upsertSearchAttributes } from '@temporalio/workflow';
import type { SettlementActivities } from '../activities/settlement/settlement';
import { RUN_STATUS_KEY } from './definitions';

// A killed worker's settlement step is noticed by its missing heartbeat and retried elsewhere;
// every step is idempotent, so a retry finishes what the lost attempt began.
const settlement = proxyActivities<Omit<SettlementActivities, 'settleNow' | 'finishSettlement'>>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

/** How long a settling run waits before retrying: a blocked commit, failed effects. */
const BLOCKED_RECHECK: Duration = '30 seconds';
const EFFECTS_RETRY: Duration = '10 seconds';

/**
 * The run workflow's end (S1-S3, S6): settling_at first, then the commit phase, the effects
 * phase and success. A blocked commit or a failed effect keeps the run settling; the workflow
 * waits for a poke (a verdict, a replay) or its recheck timer and tries again.
 * `wait` resolves true when the run was terminalized meanwhile.
 */
export async function settleRun(runId: string, wait: (timeout: Duration) => Promise<boolean>): Promise<string> {
  await settlement.beginSettling({ runId });
  upsertSearchAttributes([{ key: RUN_STATUS_KEY, value: 'settling' }]);
  for (;;) {
    const { commit, blocked } = await settlement.commitRunSettlement({ runId });
    if (commit && commit.status !== 'executing') return commit.status;
    let waiting = blocked;
    if (!blocked) {
      const effects = await settlement.applyRunSettlementEffects({ runId });
      if (effects.pending === 0) {
        const finished = await settlement.finishRunSettlement({ runId });
        if (finished.status !== 'executing') return finished.status;
        waiting = finished.blocked;
      }
    }
    if (await wait(waiting ? BLOCKED_RECHECK : EFFECTS_RETRY)) return 'terminalized';
  }
}
