import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import {
  casesRecorded,
  executionEnded,
  qaExecutionWorkflowId,
  qaSettled,
  runWorkflowId,
} from '../workflows/definitions';
import type { QaNotifier } from '../activities/qa/ending';

/** A workflow that already finished needs no message. */
function gone(err: unknown): boolean {
  return err instanceof WorkflowNotFoundError || /already completed|not found/i.test((err as Error)?.message ?? '');
}

/**
 * An execution's end, told after commit: its workflow stops walking, and its run's workflow
 * re-reads what QA still owes (the last settled obligation advances a held run, Q4).
 */
export function temporalQaNotifier(client: Client): QaNotifier {
  return {
    async executionEnded(executionId, status) {
      try {
        await client.workflow.getHandle(qaExecutionWorkflowId(executionId)).signal(executionEnded, { status });
      } catch (err) {
        if (!gone(err)) throw err;
      }
    },
    async casesRecorded(executionId) {
      try {
        await client.workflow.getHandle(qaExecutionWorkflowId(executionId)).signal(casesRecorded);
      } catch (err) {
        if (!gone(err)) throw err;
      }
    },
    async runQaSettled(runId) {
      try {
        await client.workflow.getHandle(runWorkflowId(runId)).signal(qaSettled);
      } catch (err) {
        if (!gone(err)) throw err;
      }
    },
  };
}
