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
import { foldRequested, type FoldRequest } from './definitions';

const { foldSessionUsage } = proxyActivities<Pick<SessionUsageActivities, 'foldSessionUsage'>>({
  startToCloseTimeout: '10 minutes',
  retry: { maximumAttempts: 5 },
});

/** How long the workflow stays for more requests before it ends (a later request starts it again). */
const IDLE = '2 minutes';

/**
 * session-usage/<sessionId>: takes fold requests by signal-with-start and runs them one at a
 * time, in arrival order, so two folds of one session never interleave (U10). Postgres keeps
 * the checkpoint and totals; the workflow only orders the work.
 */
export async function sessionUsage(input: { sessionId: string; pending?: FoldRequest[] }): Promise<{ folds: number }> {
  const queue: FoldRequest[] = [...(input.pending ?? [])];
  setHandler(foldRequested, (request) => {
    queue.push(request);
  });
  let folds = 0;
  for (;;) {
    if (!(await condition(() => queue.length > 0, IDLE))) return { folds };
    const request = queue.shift()!;
    try {
      await foldSessionUsage({ sessionId: input.sessionId, harness: request.harness, artifacts: request.artifacts });
      folds++;
    } catch (err) {
      // A refused fold (an artifact that is not a regular file, a session not registered) must
      // not end the queue: the requests after it are still folded.
      if (!(err instanceof ActivityFailure)) throw err;
      log.warn('a fold failed; the next request goes on', { session: input.sessionId, error: err.cause?.message });
    }
    if (workflowInfo().continueAsNewSuggested)
      await continueAsNew<typeof sessionUsage>({ sessionId: input.sessionId, pending: queue });
  }
}
