import { ActivityCancellationType, type ActivityOptions } from '@temporalio/workflow';

/**
 * A command with effects outside yoke (a deploy, a QA case over SSH): it heartbeats while it
 * runs and is never retried automatically, since running it twice is a person's decision and
 * never the side effect of a lost worker. A worker that dies mid-command stops heartbeating
 * within 30 seconds; cancelling waits for the command to end.
 */
export const ONCE_HEARTBEATING: ActivityOptions = {
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { maximumAttempts: 1 },
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
};
