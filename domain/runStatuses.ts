/**
 * A deployment run's stored status. `settling` and `superseded` are not statuses: a settling run is
 * `executing` with `settling_at` set (S1), a superseded one carries `superseded_by_run_id`.
 */
export const RUN_STATUSES = ['created', 'executing', 'succeeded', 'failed', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** The statuses a run never leaves. */
export const TERMINAL_RUN_STATUSES = ['succeeded', 'failed', 'cancelled'] as const satisfies readonly RunStatus[];

export function isTerminalRunStatus(status: string): boolean {
  return (TERMINAL_RUN_STATUSES as readonly string[]).includes(status);
}

/**
 * R1: a run that can never move again (succeeded, cancelled, or taken over) has nothing to drive:
 * no driver attaches to it and none is shown live. A failed run (not taken over) still retries.
 */
export function drivesNothing(run: { status: string; superseded_by_run_id: string | null }): boolean {
  return run.superseded_by_run_id !== null || run.status === 'succeeded' || run.status === 'cancelled';
}

/** The command that starts a created run's walk (a takeover's successor's too). */
export function executeRunCommand(runId: string): string {
  return `yoke deployment-runs execute ${runId}`;
}
