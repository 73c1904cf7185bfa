import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { TakeoverNotifier } from '../activities/runs/takeover';
import { executionRunMoved, qaExecutionWorkflowId, runSuperseded, runWorkflowId } from '../workflows/definitions';

/** A workflow that already finished (or never started, a failed predecessor's) needs no message. */
function gone(err: unknown): boolean {
  return err instanceof WorkflowNotFoundError || /already completed|not found/i.test((err as Error)?.message ?? '');
}

/** T2 after commit: moved executions continue under the successor; the predecessor's workflow ends superseded. */
export function temporalTakeoverNotifier(client: Client): TakeoverNotifier {
  const send = async (fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      if (!gone(err)) throw err;
    }
  };
  return {
    executionMoved: (executionId, runId) =>
      send(() => client.workflow.getHandle(qaExecutionWorkflowId(executionId)).signal(executionRunMoved, { runId })),
    runSuperseded: (runId, successorRunId) =>
      send(() => client.workflow.getHandle(runWorkflowId(runId)).signal(runSuperseded, { successorRunId })),
  };
}
