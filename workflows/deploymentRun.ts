import {
  ActivityCancellationType,
  condition,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { RunStageActivities } from '../activities/runs/stages';
import {
  RUN_STATUS_KEY,
  qaSettled,
  runState,
  runTerminalized,
  settlementReplay,
  stageApproved,
  type RunInput,
  type RunSnapshot,
} from './definitions';
import { settleRun } from './settlement';

const steps = proxyActivities<Omit<RunStageActivities, 'runDeployAction' | 'recordQaVerdict' | 'approveStage'>>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 20 },
});

// A deploy action heartbeats while its command or call runs, and is not retried: deploying
// twice is the caller's decision (yoke deployment-runs retry), never an automatic one.
const deploy = proxyActivities<Pick<RunStageActivities, 'runDeployAction'>>({
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { maximumAttempts: 1 },
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
});

/** How often a waiting QA or approval stage re-reads Postgres even without a signal. */
const RECHECK = '30 seconds';

/**
 * A deployment run (deployment-run/<runId>): walks the flow's stages from the first one not
 * yet passed, recording the cursor in Postgres at each step. Deploy stages act on their
 * target; QA stages wait until the stage-outstanding reader reports nothing; approval stages
 * wait for a recorded approval; auto stages pass. After the last stage comes settlement (a
 * seam the settlement work extends). Postgres decides; signals only say "look again".
 */
export async function deploymentRun(input: RunInput): Promise<{ status: string }> {
  const snapshot: RunSnapshot = {
    runId: input.runId,
    phase: 'starting',
    stage: null,
    ordinal: null,
    waitingFor: null,
    outcome: null,
  };
  let terminalized = false;
  let pokes = 0;
  setHandler(runTerminalized, () => {
    terminalized = true;
  });
  setHandler(qaSettled, () => {
    pokes++;
  });
  setHandler(stageApproved, () => {
    pokes++;
  });
  setHandler(settlementReplay, () => {
    pokes++;
  });
  setHandler(runState, () => snapshot);

  /** Waits until `ready` reads true, re-reading on every poke and at least every RECHECK. */
  async function waitUntil(ready: () => Promise<boolean>): Promise<void> {
    while (!terminalized && !(await ready())) {
      const seen = pokes;
      await condition(() => terminalized || pokes !== seen, RECHECK);
    }
  }

  const plan = await steps.loadRunPlan({ runId: input.runId });
  const completing = plan.stages[plan.stages.length - 1]!;
  for (const stage of plan.stages.slice(plan.cursor)) {
    if (terminalized) break;
    if (stage.ordinal === completing.ordinal) {
      // Q4: the run-completing stage is held, not recorded early: while any blocking QA is
      // unresolved it does not start (no cursor move, no StageStarted, no receipt). Settling
      // the last obligation signals qaSettled, which wakes this wait.
      Object.assign(snapshot, { phase: 'stage', stage: stage.name, ordinal: stage.ordinal, waitingFor: 'blocking_qa' });
      await waitUntil(async () => (await steps.blockingQaHold({ runId: input.runId })).unresolved.length === 0);
      if (terminalized) break;
    }
    const { proceed } = await steps.beginStage({ runId: input.runId, ordinal: stage.ordinal });
    if (!proceed) {
      terminalized = true;
      break;
    }
    Object.assign(snapshot, { phase: 'stage', stage: stage.name, ordinal: stage.ordinal, waitingFor: null });
    let result = { ok: true, detail: `${stage.kind} stage passed` };
    if (stage.kind === 'deploy') {
      result = await deploy.runDeployAction({ runId: input.runId, ordinal: stage.ordinal });
    } else if (stage.kind === 'qa') {
      let failed: string[] = [];
      snapshot.waitingFor = 'qa';
      await waitUntil(async () => {
        const status = await steps.qaStageStatus({ runId: input.runId, stageName: stage.name });
        failed = status.failed;
        return status.pending.length === 0 || failed.length > 0;
      });
      if (failed.length) result = { ok: false, detail: `blocking QA failed: ${failed.join(', ')}` };
    } else if (stage.kind === 'approval') {
      snapshot.waitingFor = 'approval';
      await waitUntil(() => steps.approvalRecorded({ runId: input.runId, ordinal: stage.ordinal }));
      result = { ok: true, detail: 'approved' };
    }
    if (terminalized) break;
    await steps.finishStage({ runId: input.runId, ordinal: stage.ordinal, result });
    if (!result.ok) {
      snapshot.outcome = (
        await steps.failRun({ runId: input.runId, reason: `stage ${stage.name} failed: ${result.detail}` })
      ).status;
      snapshot.phase = 'done';
      upsertSearchAttributes([{ key: RUN_STATUS_KEY, value: snapshot.outcome }]);
      return { status: snapshot.outcome };
    }
  }
  if (terminalized) {
    snapshot.phase = 'done';
    snapshot.outcome = 'terminalized';
    return { status: 'terminalized' };
  }
  snapshot.phase = 'settling';
  const status = await settleRun(input.runId, async (timeout) => {
    const seen = pokes;
    await condition(() => terminalized || pokes !== seen, timeout);
    return terminalized;
  });
  Object.assign(snapshot, { phase: 'done', outcome: status });
  if (status !== 'terminalized') upsertSearchAttributes([{ key: RUN_STATUS_KEY, value: status }]);
  return { status };
}
