import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { doctorActivities } from '../../activities/doctor';
import type { TakeoverNotifier } from '../../activities/runs/takeover';
import { runWorkflowActivities } from '../../activities/runs/runWorkflows';
import { describeExecutionWorkflow, temporalRunWorkflows } from '../../temporal/runWorkflows';
import { RUN_STATUS_KEY, qaSettled } from '../../workflows/definitions';
import { executionWaitingForVerdict, qaWorkflowFixture, type QaWorkflowFixture } from '../helpers/qaWorkflow';

/**
 * Issue 14 T2: the predecessor's workflow ends superseded, and the Web UI's YokeRunStatus says
 * so, even when Temporal could not be reached as the takeover committed (its signals lost).
 */
let fx: QaWorkflowFixture;

beforeAll(async () => {
  fx = await qaWorkflowFixture();
}, 60_000);

afterAll(async () => {
  await fx.teardown();
});

/** Temporal unreachable at takeover time: every after-commit signal fails. */
const unreachable: TakeoverNotifier = {
  executionMoved: () => Promise.reject(new Error('cannot reach Temporal at 127.0.0.1:1')),
  runSuperseded: () => Promise.reject(new Error('cannot reach Temporal at 127.0.0.1:1')),
};

/** A run waiting at QA taken over by a new run of a later commit while no signal gets through. */
async function takenOverUnsignalled(key: string) {
  const { r, repo, t } = fx;
  const pred = await executionWaitingForVerdict(fx, { candidate: repo.A, idempotencyKey: `${key}-pred` });
  const succ = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: repo.C,
    idempotencyKey: `${key}-succ`,
    items: [],
  });
  const done = await deploymentRunActivities({ db: t.db, takeoverNotifier: unreachable }).takeoverRun({
    sessionId: 'd1',
    runId: pred.runId,
    successorRunId: succ.run_id,
  });
  expect(done.warnings).toContainEqual(expect.stringMatching(/could not end run .*'s workflow: cannot reach Temporal/));
  return { ...pred, successorRunId: succ.run_id };
}

/** The workflow's end within a bound: null while it still runs. */
const endedWithin = async <T>(p: Promise<T>, ms: number): Promise<T | null> => {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<null>((r) => (timer = setTimeout(() => r(null), ms)))]);
  } finally {
    clearTimeout(timer);
  }
};

/** Frees the stage origin for the next scenario (the created successor holds the occupancy). */
async function cancel(runId: string) {
  await fx.r.terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'scenario done' });
}

test('issue 14 T2 a predecessor whose superseded signal was lost ends superseded when it next reads its run (YokeRunStatus superseded, not cancelled)', async () => {
  const { runHandle, successorRunId } = await takenOverUnsignalled('read');
  // Any wake-up (here a QA nudge; else the slow safety re-read) reads the row: taken over.
  await runHandle.signal(qaSettled);
  expect(await runHandle.result()).toEqual({ status: 'superseded' });
  expect((await runHandle.describe()).typedSearchAttributes.get(RUN_STATUS_KEY)).toBe('superseded');
  await cancel(successorRunId);
}, 120_000);

test('issue 14 T2 the reconciler (sweep) and repair re-send a lost superseded signal; doctor names the still-running predecessor until then', async () => {
  const { t, w } = fx;
  const { runId, runHandle, successorRunId } = await takenOverUnsignalled('sweep');
  expect(await endedWithin(runHandle.result(), 3_000)).toBeNull(); // nothing told it: it still waits
  const workflows = temporalRunWorkflows(w.client, w.taskQueue);
  const doctor = doctorActivities({
    db: t.db,
    workflows,
    executionWorkflowStatus: (id) => describeExecutionWorkflow(w.client, id),
  });
  const before = await doctor.checkInvariants();
  expect(before.checked).toContain('superseded_run_workflow_ended');
  expect(before.violations).toContainEqual(
    expect.objectContaining({
      invariant: 'superseded_run_workflow_ended',
      subject: runId,
      recovery: expect.stringContaining(`yoke deployment-runs repair ${runId}`),
    }),
  );

  // Temporal answers again: the sweep's reconciler tells the predecessor's workflow.
  const { reattached } = await runWorkflowActivities({ db: t.db, workflows }).reattachStrandedRuns();
  expect(reattached).toContainEqual(expect.objectContaining({ run_id: runId, workflow: 'superseded' }));
  expect(await endedWithin(runHandle.result(), 30_000)).toEqual({ status: 'superseded' });
  expect((await runHandle.describe()).typedSearchAttributes.get(RUN_STATUS_KEY)).toBe('superseded');
  const after = await doctor.checkInvariants();
  expect(after.violations.filter((v) => v.invariant === 'superseded_run_workflow_ended')).toEqual([]);
  // Told once: the reconciler leaves an ended workflow alone, and repair has nothing to end.
  const again = await runWorkflowActivities({ db: t.db, workflows }).reattachStrandedRuns();
  expect(again.reattached.map((x) => x.run_id)).not.toContain(runId);
  await cancel(successorRunId);
}, 120_000);

test('issue 14 T2 deployment-runs repair on a taken-over run whose workflow still runs ends it superseded', async () => {
  const { t, w } = fx;
  const { runId, runHandle, successorRunId } = await takenOverUnsignalled('repair');
  const workflows = temporalRunWorkflows(w.client, w.taskQueue);
  const repaired = await runWorkflowActivities({ db: t.db, workflows }).reattachRun({ runId });
  expect(repaired).toMatchObject({ run_id: runId, workflow: 'superseded' });
  expect(await endedWithin(runHandle.result(), 30_000)).toEqual({ status: 'superseded' });
  expect((await runHandle.describe()).typedSearchAttributes.get(RUN_STATUS_KEY)).toBe('superseded');
  await cancel(successorRunId);
}, 120_000);
