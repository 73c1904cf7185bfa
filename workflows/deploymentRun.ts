import {
  ActivityFailure,
  CancellationScope,
  condition,
  continueAsNew,
  isCancellation,
  patched,
  proxyActivities,
  setHandler,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { ONCE_HEARTBEATING } from './activityOptions';
import { failureDetail } from './stageFailure';
import type { RunStageActivities, StagePlan, StageResult } from '../activities/runs/stages';
import {
  ITEM_KEY,
  RUN_STATUS_KEY,
  membersChanged,
  qaSettled,
  runState,
  runSuperseded,
  runTakenOver,
  runTerminalized,
  settlementReplay,
  stageApproved,
  type RunInput,
  type RunOutcome,
  type RunSnapshot,
} from './definitions';
import { settleRun } from './settlement';

type RunSteps = Omit<RunStageActivities, 'runDeployAction' | 'recordQaVerdict' | 'approveStage'>;

// Steps only read and write Postgres. A failing connection (Postgres down, a dropped socket) is
// retried without limit, with backoff: the run waits, and its pending activity shows the attempt
// and the error (`yoke deployment-runs watch` prints it). Any other failure reaches the workflow
// non-retryable (activities/failure.ts, bugsAreFinal) and is recorded on the run.
const steps = proxyActivities<RunSteps>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

// A deploy action heartbeats while its command or call runs, and is not retried: deploying
// twice is the driver's decision (yoke deployment-runs retry), never an automatic one. A worker
// that dies mid-deploy stops heartbeating; the stage then fails naming that.
const deploy = proxyActivities<Pick<RunStageActivities, 'runDeployAction'>>(ONCE_HEARTBEATING);

/**
 * Waits are woken by signals (verdict, approval, takeover, terminalize); this slow re-read of
 * Postgres only covers a signal that never came (a CLI that died between its commit and its signal).
 */
const SAFETY_REREAD = '10 minutes';

/**
 * A workflow run's own history cap, well below the server's continue-as-new suggestion:
 * replaying thousands of wake-ups in one activation chains so many promises that the SDK's
 * workflow thread can crash (node: "async hook stack has become corrupted"), which the fault
 * suite's 10,000 wake-ups showed. A run continues as new at whichever comes first.
 */
const HISTORY_CAP = 2_000;

function timeToContinueAsNew(): boolean {
  const info = workflowInfo();
  return info.continueAsNewSuggested || info.historyLength > HISTORY_CAP;
}

/** A stage's result, or the run ended under it (terminalized, or ended elsewhere). */
type StageOutcome = StageResult | { ended: true };

/**
 * A deployment run (deployment-run/<runId>): walks the run's pinned stages from the first one
 * not yet passed, recording the cursor in Postgres at each step. Deploy stages act on their
 * target; QA and approval stages wait, woken by signals, until Postgres has their outcome; auto
 * stages pass. After the last stage comes settlement. Every way a stage can go wrong ends in a
 * recorded state: the stage failed with its reason and the run failed (O4), or the run waits on
 * its infrastructure. Postgres decides; signals only say "look again". One walk owns the
 * cursor: a retry starts a new walk and this workflow, finding itself superseded, stops.
 */
export async function deploymentRun(input: RunInput): Promise<RunOutcome> {
  const { runId } = input;
  const snapshot: RunSnapshot = {
    runId,
    walk: input.walk ?? null,
    phase: 'starting',
    stage: null,
    ordinal: null,
    waitingFor: null,
    wakeUps: 0,
    outcome: null,
  };
  let terminalized = false;
  let pokes = 0;
  let stageScope: CancellationScope | undefined;
  const poke = () => void pokes++;
  setHandler(qaSettled, poke);
  setHandler(stageApproved, poke);
  setHandler(runTakenOver, poke);
  setHandler(settlementReplay, poke);
  setHandler(runTerminalized, () => {
    terminalized = true;
    pokes++;
    stageScope?.cancel(); // a running deploy is cancelled; a wait ends
  });
  setHandler(runState, () => snapshot);
  // Members joined or left while the run executes: YokeItem follows (none for no members, since
  // Temporal's visibility stores an empty list as [""]); an older message never undoes a newer one.
  let membersVersion = -1;
  setHandler(membersChanged, ({ items, version }) => {
    // Q4 O1: a member removed may have owed the last obligation the run waits on: the wait reads
    // again now, not at the safety re-read (patched: a history without the wake replays without it).
    if (patched('members-wake')) pokes++;
    // patched: a history whose worker had no handler stored the signal with no upsert; it replays without one.
    if (!patched('members-label') || version < membersVersion) return;
    membersVersion = version;
    upsertSearchAttributes([{ key: ITEM_KEY, value: items.length ? items : null }]);
  });
  // T2: a takeover committed: the run's work continues under its successor; this walk ends.
  let superseded = false;
  setHandler(runSuperseded, () => {
    superseded = terminalized = true;
    pokes++;
    stageScope?.cancel();
  });

  const plan = await steps.loadRunPlan({ runId });
  const walk = input.walk ?? plan.walk;
  snapshot.walk = walk;
  upsertMemo({ walk }); // the reconciler tells a superseded workflow from the run's own by it
  if (plan.walk !== walk) return end('superseded');
  if (plan.status !== 'executing') return endAs(plan);

  /** Each stage kind's step. */
  const stageSteps: Record<StagePlan['kind'], (stage: StagePlan) => Promise<StageOutcome>> = {
    deploy: (stage) => deploy.runDeployAction({ runId, ordinal: stage.ordinal }),
    qa: (stage) => waitFor(stage, 'qa'),
    approval: (stage) => waitFor(stage, 'approval'),
    auto: async () => ({ ok: true, detail: 'auto stage passed' }),
  };

  /**
   * The one wait: read the stage's outcome from Postgres; without one, sleep until a signal
   * (or the slow safety re-read). The mark is taken before the read, so a signal that arrives
   * while the read runs is not lost. A long wait continues as new before its history grows
   * past what the server keeps.
   */
  async function waitFor(stage: StagePlan, what: 'qa' | 'approval'): Promise<StageOutcome> {
    snapshot.waitingFor = what;
    for (;;) {
      const mark = pokes;
      const seen = await steps.stageWait({ runId, ordinal: stage.ordinal });
      snapshot.wakeUps++;
      if (seen.run_status !== 'executing') return { ended: true };
      if (seen.result) return seen.result;
      await condition(() => pokes !== mark, SAFETY_REREAD);
      if (terminalized) return { ended: true };
      if (timeToContinueAsNew()) await continueAsNew<typeof deploymentRun>({ runId, walk });
    }
  }

  /**
   * Q4: the run-completing stage is held, not recorded early: while any blocking QA is
   * unresolved it does not start (no cursor move, no StageStarted, no receipt). Settling the
   * last obligation signals qaSettled, which wakes this wait. False when the run ended instead.
   */
  async function holdCompletingStage(stage: StagePlan): Promise<boolean> {
    Object.assign(snapshot, { phase: 'stage', stage: stage.name, ordinal: stage.ordinal, waitingFor: 'blocking_qa' });
    for (;;) {
      const mark = pokes;
      const { unresolved } = await steps.blockingQaHold({ runId });
      snapshot.wakeUps++;
      if (unresolved.length === 0) {
        snapshot.waitingFor = null;
        return true;
      }
      await condition(() => pokes !== mark, SAFETY_REREAD);
      if (terminalized) return false;
      if (timeToContinueAsNew()) await continueAsNew<typeof deploymentRun>({ runId, walk });
    }
  }

  /** Runs one stage's step in a scope that terminalize cancels; a failed activity is the stage's failure. */
  async function runStage(stage: StagePlan): Promise<StageOutcome> {
    stageScope = new CancellationScope();
    try {
      return await stageScope.run(() => stageSteps[stage.kind](stage));
    } catch (err) {
      if (terminalized && isCancellation(err)) return { ended: true };
      if (err instanceof ActivityFailure) return { ok: false, detail: failureDetail(err, runId) };
      throw err;
    } finally {
      stageScope = undefined;
      snapshot.waitingFor = null;
    }
  }

  /** Labels the workflow with the run's status (YokeRunStatus) and returns it. */
  function end(ended: string): RunOutcome {
    const status = superseded ? 'superseded' : ended;
    Object.assign(snapshot, { phase: 'done', outcome: status, waitingFor: null });
    // A newer walk's stale workflow leaves the label to the walk that owns the run; a takeover labels it.
    if (superseded || status !== 'superseded') upsertSearchAttributes([{ key: RUN_STATUS_KEY, value: status }]);
    return { status };
  }

  /**
   * T2: ends with the run's status as Postgres has it; a run its row says was taken over ends
   * superseded, whether or not the takeover's signal reached this workflow (Temporal may have
   * been unreachable when the takeover committed).
   */
  function endAs(run: { status: string; superseded_by_run_id?: string | null }): RunOutcome {
    if (run.superseded_by_run_id) superseded = true;
    return end(run.status);
  }

  async function walkStages(): Promise<RunOutcome> {
    const completing = plan.stages[plan.stages.length - 1]!;
    for (const stage of plan.stages.slice(plan.cursor)) {
      if (terminalized) return endAs(await steps.runStatus({ runId }));
      if (stage.ordinal === completing.ordinal && !(await holdCompletingStage(stage)))
        return endAs(await steps.runStatus({ runId }));
      const begun = await steps.beginStage({ runId, ordinal: stage.ordinal, walk });
      if (begun.superseded) return end('superseded');
      if (!begun.proceed) return endAs(begun);
      Object.assign(snapshot, { phase: 'stage', stage: stage.name, ordinal: stage.ordinal });
      const outcome = await runStage(stage);
      if ('ended' in outcome) return endAs(await steps.runStatus({ runId }));
      await steps.finishStage({ runId, ordinal: stage.ordinal, walk, result: outcome });
      if (!outcome.ok) {
        const reason = `stage ${stage.name} failed: ${outcome.detail}`;
        return end((await steps.failRun({ runId, walk, reason })).status);
      }
    }
    snapshot.phase = 'settling';
    // S1: operators filtering on YokeRunStatus see a run that is settling, not one still walking.
    // patched: a workflow already past this point when the label arrived replays without it.
    if (patched('settling-label')) upsertSearchAttributes([{ key: RUN_STATUS_KEY, value: 'settling' }]);
    return endAs(await settle());
  }

  /** The seam after the last stage: settlement decides how the run ends (workflows/settlement.ts). */
  async function settle(): Promise<{ status: string; superseded_by_run_id?: string | null }> {
    const status = await settleRun(runId, async (timeout) => {
      const mark = pokes;
      await condition(() => terminalized || pokes !== mark, timeout);
      snapshot.wakeUps++;
      // A blocked settlement rechecks every 30 s for as long as it stays blocked (days, maybe):
      // it too continues as new before its history grows past what the server keeps. Its
      // steps are idempotent and the new run, finding every stage passed, settles again.
      if (!terminalized && timeToContinueAsNew()) await continueAsNew<typeof deploymentRun>({ runId, walk });
      return terminalized;
    });
    return status === 'terminalized' ? await steps.runStatus({ runId }) : { status };
  }

  try {
    return await walkStages();
  } catch (err) {
    // A step that failed for good (a bug, a row gone): the run must not stay executing.
    if (!(err instanceof ActivityFailure)) throw err;
    const reason = `yoke could not record the run's progress: ${failureDetail(err, runId)}`;
    return end((await steps.failRun({ runId, walk, reason })).status);
  }
}
