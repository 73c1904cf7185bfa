import {
  ActivityFailure,
  condition,
  continueAsNew,
  log,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { SessionUsageActivities } from '../activities/usage/sessionUsage';
import { foldRequested } from './definitions';

const { foldRequestedUsage } = proxyActivities<Pick<SessionUsageActivities, 'foldRequestedUsage'>>({
  startToCloseTimeout: '10 minutes',
  retry: { maximumAttempts: 5 },
});

/** How long the workflow stays for more requests before it ends (a later request starts it again). */
const IDLE = '2 minutes';

/**
 * session-usage/<sessionId>: woken by signal-with-start, folds the session's requests one at a
 * time, in the order they were recorded, so two folds of one session never interleave (U10).
 * The requests live in Postgres, written by the CLI under the requester's own role (which the
 * database holds to its own sessions); the signal is only a nudge and carries no authority, and
 * no path from a signal or from this workflow's input is ever opened (issues 5 and 13).
 */
export async function sessionUsage(input: { sessionId: string }): Promise<{ folds: number }> {
  let nudged = true; // a start is a nudge: the request that started it is already recorded
  setHandler(foldRequested, () => {
    nudged = true;
  });
  let folds = 0;
  for (;;) {
    if (!(await condition(() => nudged, IDLE))) return { folds };
    nudged = false; // a nudge that arrives during the fold reads again afterwards
    try {
      folds += (await foldRequestedUsage({ sessionId: input.sessionId })).folded;
    } catch (err) {
      // Postgres out of reach past the retries: the requests stay recorded, the next nudge folds them.
      if (!(err instanceof ActivityFailure)) throw err;
      log.warn('a fold failed; its requests stay pending', { session: input.sessionId, error: err.cause?.message });
    }
    if (workflowInfo().continueAsNewSuggested) await continueAsNew<typeof sessionUsage>({ sessionId: input.sessionId });
  }
}
