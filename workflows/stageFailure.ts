import { ApplicationFailure, TimeoutFailure, type ActivityFailure } from '@temporalio/common';

/**
 * What a failed activity of a run says, for the stage's detail and the run's terminal reason
 * (O4). A worker that died (no heartbeat) or was stopped (SIGTERM, past its shutdown grace)
 * under a deploy is named as such, with the way on: the action may or may not have reached its
 * target, and yoke never repeats it by itself.
 */
export function failureDetail(err: ActivityFailure, runId: string): string {
  const cause = err.cause;
  const unknownOutcome = `the action may or may not have reached its target, and yoke never repeats it by itself: check the target, then yoke deployment-runs retry ${runId}`;
  if (cause instanceof TimeoutFailure && cause.timeoutType === 'HEARTBEAT') {
    return `worker_lost: the worker running ${err.activityType} stopped heartbeating (it died or lost its connection); ${unknownOutcome}`;
  }
  if (cause instanceof ApplicationFailure && cause.type === 'WorkerShutdown') {
    return `worker_lost: the worker running ${err.activityType} was stopped before it finished (${cause.message}); ${unknownOutcome}`;
  }
  if (cause instanceof TimeoutFailure) return `timed_out: ${err.activityType} did not finish (${cause.timeoutType})`;
  if (cause instanceof ApplicationFailure) return `${cause.type ?? 'error'}: ${cause.message}`;
  return `${err.activityType} failed: ${cause?.message ?? err.message}`;
}
