import { CancellationScope, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { TestMachineActivities } from '../activities/testMachines';
import type { CheckInput } from './definitions';

const short = proxyActivities<Pick<TestMachineActivities, 'beginCheck' | 'finishCheck'>>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: [] },
});

// The SSH command heartbeats while it runs, so a dead worker is noticed within the heartbeat
// timeout and a cancellation reaches the connection.
const ssh = proxyActivities<Pick<TestMachineActivities, 'runCheckCommand'>>({
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { maximumAttempts: 1 },
});

/**
 * `yoke test-machine verify` / `golden-capture`: hold the machine, run its command over SSH,
 * then record the result and release the machine in one transaction, which serves the line
 * when the machine is healthy (W8). The release runs even if the command is cancelled.
 */
export async function testMachineCheck(input: CheckInput) {
  const { claim_id: claimId } = await short.beginCheck({ testMachine: input.testMachine, sessionId: input.sessionId });
  let outcome;
  try {
    outcome = await ssh.runCheckCommand({ testMachine: input.testMachine, kind: input.kind });
  } catch (err) {
    outcome = {
      kind: input.kind, passed: false, reason: 'check_failed', exit_code: null, output_digest: null,
      output_excerpt: err instanceof Error ? err.message : String(err), started_at: new Date().toISOString(),
    };
  }
  const finished = await CancellationScope.nonCancellable(() =>
    short.finishCheck({ testMachine: input.testMachine, sessionId: input.sessionId, claimId, outcome, requestId: workflowInfo().workflowId }));
  return { ...finished, outcome };
}
