import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  TimeoutFailure,
  proxyActivities,
  workflowInfo,
} from '@temporalio/workflow';
import type { CheckOutcome, TestMachineActivities } from '../activities/testMachines';
import type { CheckInput } from './definitions';

const short = proxyActivities<Pick<TestMachineActivities, 'beginCheck' | 'finishCheck'>>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: [] },
});

// The SSH command heartbeats while it runs, so a dead worker is noticed within the heartbeat
// timeout and a cancellation reaches the connection; the workflow waits for the connection
// to close before it releases the machine.
const ssh = proxyActivities<Pick<TestMachineActivities, 'runCheckCommand'>>({
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '6 seconds',
  retry: { maximumAttempts: 1 },
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
});

/**
 * `yoke test-machine verify` / `golden-capture`: hold the machine, run its command over SSH,
 * then record the result and release the machine in one transaction, which serves the line
 * when the machine is healthy (W8). A run that did not finish (cancelled, worker lost) says
 * nothing about the machine's health: nothing is recorded, the machine is still released,
 * and the failure is raised.
 */
export async function testMachineCheck(input: CheckInput) {
  const { claim_id: claimId } = await short.beginCheck({
    testMachine: input.testMachine,
    sessionId: input.sessionId,
    requestId: workflowInfo().workflowId,
  });
  const finish = (outcome: CheckOutcome | null) =>
    CancellationScope.nonCancellable(() =>
      short.finishCheck({
        testMachine: input.testMachine,
        sessionId: input.sessionId,
        claimId,
        outcome,
        requestId: workflowInfo().workflowId,
      }),
    );
  let outcome: CheckOutcome;
  try {
    outcome = await ssh.runCheckCommand({ testMachine: input.testMachine, kind: input.kind });
  } catch (err) {
    await finish(null);
    // The worker died or lost its connection mid-check: say so, as a refusal the CLI can print
    // (not "Workflow execution failed"); the machine's health is unchanged.
    if (err instanceof ActivityFailure && err.cause instanceof TimeoutFailure) {
      throw ApplicationFailure.create({
        type: 'check_interrupted',
        message: `the ${input.kind} of ${input.testMachine} did not finish: the worker running it stopped (${(err.cause.timeoutType ?? 'activity').toLowerCase()} timeout); nothing was recorded and the machine was released`,
        nonRetryable: true,
        details: [
          {
            kind: 'unreachable',
            recovery: `run it again once a worker runs: yoke test-machine ${input.kind === 'verification' ? 'verify' : 'golden-capture'} ${input.testMachine}`,
            details: { test_machine: input.testMachine },
          },
        ],
      });
    }
    throw err;
  }
  const finished = await finish(outcome);
  return { ...finished, outcome };
}
