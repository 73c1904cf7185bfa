import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { RunWalk, RunWorkflowView, RunWorkflows, WorkflowAttachment } from '../activities/runs/runWorkflows';
import {
  ITEM_KEY,
  PROJECT_KEY,
  RUN_STATUS_KEY,
  TARGET_ORIGIN_KEY,
  membersChanged,
  runWorkflowId,
  qaExecutionWorkflowId,
} from '../workflows/definitions';
import { temporalTakeoverNotifier } from './takeoverSignals';
import type { deploymentRun } from '../workflows/deploymentRun';

/** What Temporal knows of a run's workflow: its status, and the walk it runs (from its memo). */
export async function describeRunWorkflow(client: Client, runId: string): Promise<RunWorkflowView> {
  const workflowId = runWorkflowId(runId);
  try {
    const d = await client.workflow.getHandle(workflowId).describe();
    const memo = (d.memo ?? {}) as { walk?: number };
    return { workflow_id: workflowId, status: d.status.name, walk: memo.walk ?? null };
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return { workflow_id: workflowId, status: null, walk: null };
    throw err;
  }
}

/** A QA plan execution's workflow status as Temporal reports it: null when there is none. */
export async function describeExecutionWorkflow(client: Client, executionId: number): Promise<string | null> {
  try {
    return (await client.workflow.getHandle(qaExecutionWorkflowId(executionId)).describe()).status.name;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  }
}

/**
 * Makes sure the run's current walk has a running workflow (deployment-run/<runId>):
 * nothing to do when it runs; a workflow of an older walk still running (a retry whose old
 * walk has not noticed yet) is replaced, so one workflow owns the cursor; otherwise a new
 * workflow run starts. Idempotent: the workflow id is the run id.
 */
export async function ensureRunWorkflow(client: Client, taskQueue: string, run: RunWalk): Promise<WorkflowAttachment> {
  const now = await describeRunWorkflow(client, run.run_id);
  // No memo yet: the workflow has not run its first task; it adopts the run's walk then.
  if (now.status === 'RUNNING' && (now.walk === null || now.walk === run.walk)) return 'running';
  const replace = now.status === 'RUNNING';
  await client.workflow.start<typeof deploymentRun>('deploymentRun', {
    workflowId: now.workflow_id,
    taskQueue,
    args: [{ runId: run.run_id, walk: run.walk }],
    memo: { walk: run.walk },
    workflowIdConflictPolicy: replace ? 'TERMINATE_EXISTING' : 'USE_EXISTING',
    typedSearchAttributes: [
      { key: PROJECT_KEY, value: run.project },
      { key: RUN_STATUS_KEY, value: 'executing' },
      // A memberless run carries no YokeItem: Temporal's visibility stores an empty list as [""].
      ...(run.member_items.length ? [{ key: ITEM_KEY, value: run.member_items }] : []),
      // the run's own target (a production run also occupies its stage origins; those sort first)
      { key: TARGET_ORIGIN_KEY, value: run.target_origin },
    ],
  });
  return replace ? 'replaced' : 'started';
}

/** The RunWorkflows port over a Temporal client and the workers' task queue. */
export function temporalRunWorkflows(client: Client, taskQueue: string): RunWorkflows {
  return {
    ensure: (run) => ensureRunWorkflow(client, taskQueue, run),
    describe: (runId) => describeRunWorkflow(client, runId),
    workflowId: runWorkflowId,
    // The takeover's own message (a workflow that ended meanwhile needs none).
    supersede: (runId, successorRunId) => temporalTakeoverNotifier(client).runSuperseded(runId, successorRunId),
    async membersChanged(runId, labels) {
      try {
        await client.workflow.getHandle(runWorkflowId(runId)).signal(membersChanged, labels);
      } catch (err) {
        // A workflow that ended meanwhile keeps the labels it ended with.
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
    },
  };
}
