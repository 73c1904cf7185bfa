import type { ExecutionRow, ExecutionStatus } from '../../db/database';
import type { Executor } from '../../db/pool';
import {
  answerPlanRows,
  itemLabel,
  liveExecutionIdsOfRun,
  markExecutionEnded,
  settlingRunsOfItem,
} from '../../db/qaExecutions';
import { cancelWaitsOfExecution, lockClaimForRelease, releaseServingLine, type LineEffects } from '../waitingLine';

/** What an ended execution owes its observers after commit: the run re-reads its QA, the workflow stops. */
export interface QaEffects {
  ended: { execution_id: number; run_id: string; status: string }[];
  /** S5: other settling runs with the ended execution's item as a member retry their close-out. */
  retry: string[];
}

export function noQaEffects(): QaEffects {
  return { ended: [], retry: [] };
}

/** Tells the run workflow and the execution workflow; the Temporal implementation is signals.ts. */
export interface QaNotifier {
  executionEnded(executionId: number, status: string): Promise<void>;
  runQaSettled(runId: string): Promise<void>;
  /** Issue 13: a verdict or waiver was recorded; the execution's workflow re-reads its cases (a nudge, no payload). */
  casesRecorded?(executionId: number): Promise<void>;
}

/**
 * W9: every end of an execution (passed, failed, aborted, superseded, its run terminalized)
 * cancels its waits and releases its lease in the caller's transaction, so the release
 * serves the line there too; a passed or failed execution answers its plan's run QA rows.
 * Returns undefined when the execution had already ended.
 */
export async function endExecution(
  trx: Executor,
  executionId: number,
  status: Exclude<ExecutionStatus, 'running'>,
  reason: string,
  by: { sessionId: string | null; actorId: string | null },
  lifetimeMs: number,
  effects: LineEffects,
  qa: QaEffects,
): Promise<ExecutionRow | undefined> {
  const before = await markExecutionEnded(trx, executionId, status, reason);
  if (!before) return undefined;
  await cancelWaitsOfExecution(trx, executionId, `execution_${status}`, lifetimeMs, effects);
  if (before.held_claim_id !== null) {
    const claim = await lockClaimForRelease(trx, before.held_claim_id);
    if (claim && !claim.released_at) {
      await releaseServingLine(
        trx,
        claim,
        {
          reason: `QA plan execution ${executionId} ${status}: ${reason}`,
          bySessionId: by.sessionId ?? claim.session_id,
          byActorId: by.actorId ?? 'yoke',
        },
        lifetimeMs,
        effects,
      );
    }
  }
  if (status === 'passed' || status === 'failed')
    await answerPlanRows(trx, before, await itemLabel(trx, before.item_id), status);
  qa.ended.push({ execution_id: executionId, run_id: before.run_id, status });
  if (before.item_id !== null) qa.retry.push(...(await settlingRunsOfItem(trx, before.item_id, before.run_id)));
  return before;
}

/**
 * O4: a failed or cancelled run aborts every live execution in its status transaction; so
 * does a run that succeeds, whose QA was settled some other way (a verdict on the plan's check
 * itself): nothing is left for them to prove, and a waiting one must not take a machine later.
 */
export async function abortLiveExecutionsOfRun(
  trx: Executor,
  runId: string,
  disposition: 'failed' | 'cancelled' | 'succeeded',
  sessionId: string | null,
  lifetimeMs: number,
  effects: LineEffects,
  qa: QaEffects,
): Promise<number[]> {
  const aborted: number[] = [];
  for (const execution_id of await liveExecutionIdsOfRun(trx, runId)) {
    const ended = await endExecution(
      trx,
      execution_id,
      'aborted',
      `run_${disposition}`,
      { sessionId, actorId: null },
      lifetimeMs,
      effects,
      qa,
    );
    if (ended) aborted.push(execution_id);
  }
  return aborted;
}

/**
 * The QA effects of executions a run's own settlement ended: their workflows stop and other
 * runs settling their items are poked (S5), but not `runId` itself, which is the one settling.
 */
export async function notifyQaOfSettlement(
  notifier: QaNotifier | undefined,
  qa: QaEffects,
  runId: string,
): Promise<string[]> {
  return notifyQa(
    notifier && {
      ...notifier,
      runQaSettled: async (id) => (id === runId ? undefined : notifier.runQaSettled(id)),
    },
    qa,
  );
}

/** Sends the collected QA effects after commit; failures come back as warnings. */
export async function notifyQa(notifier: QaNotifier | undefined, qa: QaEffects): Promise<string[]> {
  if (!notifier) return [];
  const warnings: string[] = [];
  for (const e of qa.ended) {
    try {
      await notifier.executionEnded(e.execution_id, e.status);
    } catch (err) {
      warnings.push(`could not signal execution ${e.execution_id}: ${(err as Error).message}`);
    }
  }
  for (const runId of new Set([...qa.ended.map((e) => e.run_id), ...qa.retry])) {
    try {
      await notifier.runQaSettled(runId);
    } catch (err) {
      warnings.push(`could not signal run ${runId}: ${(err as Error).message}`);
    }
  }
  return warnings;
}
