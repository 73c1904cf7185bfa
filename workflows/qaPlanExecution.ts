import {
  ActivityCancellationType,
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  condition,
  ContinueAsNew,
  continueAsNew,
  isCancellation,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { QaExecutionActivities, StepOutcome } from '../activities/qa/executions';
import type { PlanStep } from '../domain/qaPlan';
import {
  executionEnded,
  executionHostReserved,
  executionRunMoved,
  executionState,
  recordVerdict,
  waiveCase,
  type ExecutionSnapshot,
  type RecordedCase,
} from './definitions';

const steps = proxyActivities<
  Omit<
    QaExecutionActivities,
    'runStepCommand' | 'beginExecution' | 'getExecution' | 'abortExecution' | 'authorizeWaiver'
  >
>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 20 },
});

// A case's command heartbeats while it runs and is never retried automatically: running a
// test twice is a decision, not a side effect of a lost worker.
const ssh = proxyActivities<Pick<QaExecutionActivities, 'runStepCommand'>>({
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { maximumAttempts: 1 },
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
});

export interface QaPlanExecutionInput {
  executionId: number;
  runId: string;
  steps: PlanStep[];
  /** Cases already recorded, carried across continue-as-new (their rows are in Postgres too). */
  recorded?: Record<string, string>;
  /** Start afresh past this many history events even before the server suggests it. */
  maxHistoryEvents?: number;
}

function refuse(code: string, message: string, recovery: string, details: Record<string, unknown>): never {
  throw ApplicationFailure.create({
    type: code,
    message,
    nonRetryable: true,
    details: [{ recovery, details, kind: 'refusal' }],
  });
}

/**
 * A QA plan execution (qa-plan-execution/<id>): walks the plan's steps in order. Automatic
 * steps lease their test machine; when it is held or unhealthy the execution is in the line
 * and sleeps until the reservation signal wakes it (W2, no polling); an SSH failure records
 * ssh_unavailable and waits in line again (W3). Manual steps and the gate wait for a human
 * verdict (an update with a validator). Every end goes through one activity that cancels
 * waits and releases the lease in one transaction (W9).
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
  let finishing = false;
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

  const validate = (req: { case: string; runId?: string }, human: boolean) => {
    if (ended !== null || finishing)
      refuse(
        'qa_execution_settled',
        `QA plan execution ${executionId} is ${ended ?? 'settling'}; its cases are closed`,
        `see it: yoke qa get ${executionId}`,
        { execution_id: executionId },
      );
    if (req.runId !== undefined && req.runId !== runId)
      refuse(
        'qa_execution_wrong_run',
        `QA plan execution ${executionId} belongs to run ${runId}, not ${req.runId}`,
        `record it against its own run, or find the execution of ${req.runId}: yoke deployment-runs qa-pending ${req.runId}`,
        { execution_id: executionId, run_id: runId, named_run_id: req.runId },
      );
    const step = input.steps.find((s) => s.name === req.case);
    if (!step)
      refuse(
        'qa_case_not_found',
        `QA plan execution ${executionId} has no case ${req.case}`,
        `name one of: ${input.steps.map((s) => s.name).join(', ')}`,
        { execution_id: executionId, case: req.case },
      );
    if (human && step.kind !== 'manual' && step.kind !== 'gate')
      refuse(
        'qa_case_automatic',
        `case ${step.name} is automatic: its command's exit status is the verdict`,
        `watch it: yoke qa watch ${executionId}, or waive it: yoke qa waive ${executionId} --case ${step.name} --reason R`,
        { execution_id: executionId, case: step.name },
      );
    if (recorded.has(step.name))
      refuse(
        'qa_case_already_recorded',
        `case ${step.name} is already recorded ${recorded.get(step.name)}`,
        `see it: yoke qa get ${executionId}`,
        { execution_id: executionId, case: step.name },
      );
  };

  const remember = (r: RecordedCase): RecordedCase => {
    recorded.set(r.case, r.verdict);
    pokes++;
    // A waived automatic step that is running now stops: its verdict is decided.
    if (snapshot.step === r.case) running?.cancel();
    return r;
  };
  setHandler(recordVerdict, async (req) => remember(await steps.recordHumanVerdict({ executionId, ...req })), {
    validator: (req) => validate(req, true),
  });
  setHandler(waiveCase, async (req) => remember(await steps.waiveExecutionCase({ executionId, ...req })), {
    validator: (req) => validate(req, false),
  });

  /** Starts afresh with what is recorded, once no verdict or waiver is still being written. */
  const continueAsNewNow = async () => {
    await condition(allHandlersFinished);
    if (ended !== null || !historyFull()) return;
    // The run it now belongs to (a takeover may have moved it) and what it recorded carry over.
    await continueAsNew<typeof qaPlanExecution>({ ...input, runId, recorded: Object.fromEntries(recorded) });
  };

  let failedCase: string | null = null;
  let error: string | null = null;
  try {
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
            await condition(() => pokes !== mark || ended !== null || recorded.has(step.name) || historyFull());
            // The wait stays in the line (Postgres): the next run re-joins it or consumes its turn.
            if (pokes === mark && ended === null && !recorded.has(step.name)) await continueAsNewNow();
            continue;
          }
          snapshot.phase = 'step';
          let outcome: StepOutcome | undefined;
          try {
            outcome = await CancellationScope.cancellable(async () => {
              running = CancellationScope.current();
              return ssh.runStepCommand({ executionId, ordinal: step.ordinal });
            });
          } catch (err) {
            if (!isCancellation(err) && !(ended !== null || recorded.has(step.name))) throw err;
          } finally {
            running = undefined;
          }
          if (!outcome || ended !== null || recorded.has(step.name)) continue;
          if (outcome.kind === 'ssh_unavailable') {
            await steps.recordSshUnavailable({ executionId, ordinal: step.ordinal, detail: outcome.detail });
            continue;
          }
          const r = await steps.recordStepOutcome({ executionId, ordinal: step.ordinal, outcome });
          recorded.set(r.case, r.verdict);
        }
      } else {
        snapshot.phase = 'waiting_for_verdict';
        while (!recorded.has(step.name) && ended === null) {
          await condition(() => recorded.has(step.name) || ended !== null || historyFull());
          if (!recorded.has(step.name) && ended === null) await continueAsNewNow();
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
    finishing = true;
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
