import { refusal } from './errors';

/**
 * A run whose QA no longer takes changes (cancelled, succeeded). A run taken over (T2) is
 * cancelled too, but its checks and executions moved to its successor, so the refusal names
 * the successor and repeats the command there instead of sending the caller to "a live run".
 */
export function qaClosedRefusal(
  run: { run_id: string; status: string; superseded_by_run_id: string | null },
  recovery: { live: string; onSuccessor: (successor: string) => string },
) {
  if (run.superseded_by_run_id) {
    return refusal(
      'run_superseded',
      `run ${run.run_id} was taken over by run ${run.superseded_by_run_id}; its QA continues under run ${run.superseded_by_run_id}`,
      {
        recovery: recovery.onSuccessor(run.superseded_by_run_id),
        details: { run_id: run.run_id, superseded_by_run_id: run.superseded_by_run_id },
      },
    );
  }
  return refusal(`run_${run.status}`, `run ${run.run_id} is ${run.status}; its QA is closed`, {
    recovery: recovery.live,
    details: { run_id: run.run_id },
  });
}
