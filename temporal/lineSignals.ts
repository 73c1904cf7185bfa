import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import {
  cancelWait,
  executionHostReserved,
  hostReserved,
  qaExecutionWorkflowId,
  waitWorkflowId,
  YOKE_TEST_MACHINE,
  type TurnReserved,
  type WaitInput,
} from '../workflows/definitions';
import type { LineNotifier } from '../activities/waitingLine';
import type { testMachineWait } from '../workflows/testMachineWait';

const TEST_MACHINE_KEY = defineSearchAttributeKey(YOKE_TEST_MACHINE, SearchAttributeType.KEYWORD);

/**
 * The waiting line's messages to its wait workflows: a join starts the session's wait, a
 * reservation wakes it (starting it if it is missing, so a lost start never loses a turn),
 * a cancellation stops it.
 */
export function temporalLineNotifier(client: Client, taskQueue: string): LineNotifier {
  const options = (testMachine: string, sessionId: string) => ({
    workflowId: waitWorkflowId(testMachine, sessionId),
    taskQueue,
    args: [{ testMachine, sessionId } satisfies WaitInput] as [WaitInput],
    typedSearchAttributes: [{ key: TEST_MACHINE_KEY, value: testMachine }],
  });
  return {
    async joined(w) {
      if (w.qa_plan_execution_id !== null) return; // the execution's own workflow waits (W2)
      try {
        await client.workflow.start<typeof testMachineWait>('testMachineWait', options(w.test_machine, w.session_id));
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
    },
    async reserved(r) {
      if (r.qa_plan_execution_id !== null) {
        // W2: the reservation signal wakes the sleeping execution, which consumes the turn.
        try {
          await client.workflow
            .getHandle(qaExecutionWorkflowId(r.qa_plan_execution_id))
            .signal(executionHostReserved, { testMachine: r.test_machine, claimId: r.claim_id });
          return;
        } catch (err) {
          if (!(err instanceof WorkflowNotFoundError)) throw err;
          // No execution workflow to wake: the session's wait workflow lets the turn expire.
        }
      }
      await client.workflow.signalWithStart<typeof testMachineWait, [TurnReserved]>('testMachineWait', {
        ...options(r.test_machine, r.session_id),
        signal: hostReserved,
        signalArgs: [{ claimId: r.claim_id, reservedUntil: r.reserved_until }],
      });
    },
    async cancelled(c) {
      if (c.qa_plan_execution_id) return; // the execution's end cancelled it; its workflow knows
      try {
        await client.workflow
          .getHandle(waitWorkflowId(c.test_machine, c.session_id))
          .signal(cancelWait, { reason: c.reason });
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err; // already finished: nothing to stop
      }
    },
  };
}
