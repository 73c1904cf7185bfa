import { type Client, ScheduleAlreadyRunning, ScheduleOverlapPolicy } from '@temporalio/client';

export const SWEEP_SCHEDULE_ID = 'yoke-stale-session-sweep';

export interface SweepScheduleOptions {
  scheduleId?: string;
  taskQueue: string;
  intervalMs: number;
  staleAfterMs: number;
}

/**
 * C5: the stale-session sweep runs as a Temporal Schedule, so it keeps its cadence across
 * worker restarts and shows in the Web UI. Creating it is idempotent; an existing schedule
 * is updated to the configured interval and threshold.
 */
export async function ensureSweepSchedule(client: Client, opts: SweepScheduleOptions): Promise<string> {
  const scheduleId = opts.scheduleId ?? SWEEP_SCHEDULE_ID;
  const action = {
    type: 'startWorkflow' as const,
    workflowType: 'staleSessionSweep',
    args: [{ staleAfterMs: opts.staleAfterMs }],
    taskQueue: opts.taskQueue,
    workflowExecutionTimeout: 5 * 60_000,
  };
  const spec = { intervals: [{ every: opts.intervalMs }] };
  try {
    await client.schedule.create({ scheduleId, spec, action, policies: { overlap: ScheduleOverlapPolicy.SKIP } });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    await client.schedule.getHandle(scheduleId).update((prev) => ({ ...prev, spec, action }));
  }
  return scheduleId;
}
