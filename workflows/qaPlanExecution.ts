import {
  ActivityFailure,
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  condition,
  ContinueAsNew,
  continueAsNew,
  isCancellation,
  patched,
  proxyActivities,
  setHandler,
  TimeoutFailure,
  workflowInfo,
} from '@temporalio/workflow';
import { ONCE_HEARTBEATING } from './activityOptions';
import type { QaExecutionActivities, StepOutcome } from '../activities/qa/executions';
import type { PlanStep } from '../domain/qaPlan';
import {
  casesRecorded,
  executionEnded,
  executionHostReserved,
  executionRunMoved,
  executionState,
  type ExecutionSnapshot,
  type RecordedCase,
} from './definitions';

const steps = proxyActivities<
  Omit<
    QaExecutionActivities,
    | 'runStepCommand'
    | 'beginExecution'
    | 'getExecution'
    | 'abortExecution'
    | 'recordHumanVerdict'
    | 'waiveExecutionCase'
  >
>({
  startToCloseTimeout: '1 minute',
  // Issue 10: steps only read and write Postgres; a failing connection is retried without limit,
  // with backoff, and anything else reaches the workflow non-retryable (workers/activities.ts).
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

// A case's command heartbeats while it runs and is never retried by Temporal: the workflow
// decides. A command that reported no result (its worker died or lost its connection) is an
// infrastructure failure, so the case rejoins its machine's line and runs again (interrupted).
const ssh = proxyActivities<Pick<QaExecutionActivities, 'runStepCommand'>>(ONCE_HEARTBEATING);

/**
 * Issue 10 / W3: why a case's command ended with no result of its own, when that is an
 * infrastructure failure: the activity timed out (the worker running it was killed or cut off,
 * so it stopped heartbeating) or failed on something retryable (Postgres unreachable). A
 * refusal or a bug (non-retryable) is not: it still ends the execution, naming it.
 */
function interruption(err: unknown): string | null {
  if (!(err instanceof ActivityFailure)) return null;
  const cause = err.cause;
  if (cause instanceof TimeoutFailure)
    return cause.timeoutType === 'HEARTBEAT'
      ? 'worker_lost: the worker running the command stopped heartbeating (it died or lost its connection)'
      : `timed_out: the command's activity timed out (${cause.timeoutType})`;
  if (cause instanceof ApplicationFailure && !cause.nonRetryable) return `infrastructure: ${cause.message}`;
  return null;
}

/** The longest pause before an interrupted case runs again, doubling from one second. */
const MAX_RERUN_PAUSE_MS = 60_000;

/** The safety net under the casesRecorded nudge: a verdict recorded without one is read this late. */
const REREAD_EVERY = '5 minutes';

/** The patch under which the safety re-read also reads the execution's status, in every wait. */
const REREADS_STATUS = 'qa-execution-rereads-status';

export interface QaPlanExecutionInput {
  executionId: number;
  runId: string;
  steps: PlanStep[];
  /** Cases already recorded, carried across continue-as-new (their rows are in Postgres too). */
  recorded?: Record<string, string>;
  /** Start afresh past this many history events even before the server suggests it. */
  maxHistoryEvents?: number;
}

/**
 * A QA plan execution (qa-plan-execution/<id>): walks the plan's steps in order. Automatic
 * steps lease their test machine; when it is held or unhealthy the execution is in the line
 * and sleeps until the reservation signal wakes it (W2, no polling); an SSH failure records
 * ssh_unavailable and waits in line again (W3), and so does a case whose command reported no
 * result because its worker was lost (issue 10): only a command's own result decides a case. Manual steps and the gate wait for a human
 * verdict, which the CLI records in Postgres under its caller's role (issue 13); the
 * casesRecorded signal only wakes the workflow to re-read the recorded cases, and a slow
 * timer re-reads them too, so a nudge lost after the commit strands nothing. Every end goes
 * through one activity that cancels waits and releases the lease in one transaction (W9).
 */
export async function qaPlanExecution(input: QaPlanExecutionInput): Promise<ExecutionSnapshot> {
  const { executionId } = input;
  const snapshot: ExecutionSnapshot = { executionId, phase: 'starting', step: null, ordinal: null, outcome: null };
  const recorded = new Map<string, string>(Object.entries(input.recorded ?? {}));
  // Long human waits grow the history with every wake-up; the server says when to start afresh.
  const historyFull = () =>
    workflowInfo().continueAsNewSuggested ||
    (input.maxHistoryEvents !== undefined && workflowInfo().historyLength > input.maxHistoryEvents);
  let ended: string | null = null;
  let pokes = 0;
  let running: CancellationScope | undefined;

  setHandler(executionHostReserved, () => {
    pokes++;
  });
  setHandler(executionEnded, ({ status }) => {
    ended ??= status;
    running?.cancel();
  });
  setHandler(executionState, () => snapshot);
  // T2: after a takeover the same execution continues under its new run (owners, cases, host turns unchanged).
  let runId = input.runId;
  setHandler(executionRunMoved, (moved) => {
    runId = moved.runId;
  });

  const remember = (r: RecordedCase): RecordedCase => {
    recorded.set(r.case, r.verdict);
    pokes++;
    // A waived automatic step that is running now stops: its verdict is decided.
    if (snapshot.step === r.case) running?.cancel();
    return r;
  };
  /** What Postgres records is the verdict; nothing a message says is. */
  const reread = async () => {
    for (const r of await steps.recordedCases({ executionId })) if (recorded.get(r.case) !== r.verdict) remember(r);
    // So is the execution's end: one whose executionEnded signal was lost (its command died after
    // the commit, Temporal away) is read here, and the workflow ends instead of waiting forever.
    if (patched(REREADS_STATUS)) {
      const status = await steps.executionStatus({ executionId });
      if (status !== 'running' && ended === null) {
        ended = status;
        running?.cancel();
      }
    }
  };
  // A failed re-read in a handler is not the execution's failure: the next nudge or the timer reads again.
  setHandler(casesRecorded, () => reread().catch(() => undefined));

  /** Starts afresh with what is recorded, once no verdict or waiver is still being written. */
  const continueAsNewNow = async () => {
    await condition(allHandlersFinished);
    if (ended !== null || !historyFull()) return;
    // The run it now belongs to (a takeover may have moved it) and what it recorded carry over.
    await continueAsNew<typeof qaPlanExecution>({ ...input, runId, recorded: Object.fromEntries(recorded) });
  };

  /** The current case's interruptions in a row: each waits twice as long before it runs again. */
  let interruptions = 0;
  let failedCase: string | null = null;
  let error: string | null = null;
  try {
    // Cases recorded before this workflow listened. A continued run needs none: a nudge its
    // predecessor took was read before it continued (allHandlersFinished), later ones reach this run.
    if (input.recorded === undefined) await reread();
    for (const step of input.steps) {
      if (ended !== null) break;
      Object.assign(snapshot, { phase: 'step', step: step.name, ordinal: step.ordinal });
      if (step.kind === 'automatic' || step.kind === 'host_reset') {
        while (ended === null && !recorded.has(step.name)) {
          const mark = pokes; // taken before the join: a reservation that lands meanwhile is not lost
          const turn = await steps.acquireHost({ executionId, ordinal: step.ordinal });
          if (!turn.held) {
            if (turn.ended) {
              ended ??= turn.status;
              break;
            }
            snapshot.phase = 'waiting_for_host';
            const woken = () => pokes !== mark || ended !== null || recorded.has(step.name) || historyFull();
            // A host wait re-reads Postgres slowly too (patched: it had no timer), so a lost end or nudge is read.
            if (patched(REREADS_STATUS)) while (!(await condition(woken, REREAD_EVERY))) await reread();
            else await condition(woken);
            // The wait stays in the line (Postgres): the next run re-joins it or consumes its turn.
            if (pokes === mark && ended === null && !recorded.has(step.name)) await continueAsNewNow();
            continue;
          }
          snapshot.phase = 'step';
          let outcome: StepOutcome | undefined;
          let interrupted: string | null = null;
          try {
            outcome = await CancellationScope.cancellable(async () => {
              running = CancellationScope.current();
              return ssh.runStepCommand({ executionId, ordinal: step.ordinal });
            });
          } catch (err) {
            if (!isCancellation(err) && !(ended !== null || recorded.has(step.name))) {
              interrupted = interruption(err);
              // patched: an execution that already ended on such a failure replays as it ran.
              if (interrupted === null || !patched('qa-case-interrupted-runs-again')) throw err;
            }
          } finally {
            running = undefined;
          }
          if (interrupted !== null && ended === null && !recorded.has(step.name)) {
            // Issue 10 / W3: never an error verdict; the case rejoins the line and runs again.
            interruptions++;
            await steps.recordStepInterrupted({ executionId, ordinal: step.ordinal, detail: interrupted });
            const pause = Math.min(1_000 * 2 ** (interruptions - 1), MAX_RERUN_PAUSE_MS);
            snapshot.phase = 'waiting_for_host';
            await condition(() => ended !== null || recorded.has(step.name), pause);
            continue;
          }
          if (!outcome || ended !== null || recorded.has(step.name)) continue;
          if (outcome.kind === 'ssh_unavailable') {
            await steps.recordSshUnavailable({ executionId, ordinal: step.ordinal, detail: outcome.detail });
            continue;
          }
          interruptions = 0;
          const r = await steps.recordStepOutcome({ executionId, ordinal: step.ordinal, outcome });
          recorded.set(r.case, r.verdict);
        }
      } else {
        snapshot.phase = 'waiting_for_verdict';
        while (!recorded.has(step.name) && ended === null) {
          const woken = await condition(() => recorded.has(step.name) || ended !== null || historyFull(), REREAD_EVERY);
          if (!woken) await reread();
          else if (!recorded.has(step.name) && ended === null) await continueAsNewNow();
        }
      }
      if (ended !== null) break;
      if (recorded.get(step.name) === 'failed') {
        failedCase = step.name;
        break;
      }
    }
  } catch (err) {
    if (err instanceof ContinueAsNew) throw err;
    error = (err as Error).message;
  }
  if (ended === null) {
    snapshot.phase = 'ending';
    const status = failedCase || error ? 'failed' : 'passed';
    const reason = error
      ? `the execution could not continue: ${error}`
      : failedCase
        ? `case ${failedCase} failed`
        : 'every case passed or was waived';
    ended = (await steps.finishExecution({ executionId, status, reason })).status;
  }
  Object.assign(snapshot, { phase: 'done', outcome: ended });
  await condition(allHandlersFinished);
  return snapshot;
}
