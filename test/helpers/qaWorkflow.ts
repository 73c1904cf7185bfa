import type { WorkflowHandle } from '@temporalio/client';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { temporalTakeoverNotifier } from '../../temporal/takeoverSignals';
import { executionState, qaExecutionWorkflowId, runState, runWorkflowId } from '../../workflows/definitions';
import type { deploymentRun } from '../../workflows/deploymentRun';
import type { qaPlanExecution } from '../../workflows/qaPlanExecution';
import { createTestDatabase, type TestDatabase } from './db';
import { createTestRepository, type TestRepository } from './git';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget } from './runs';
import { startTestWorker, until, type TestWorker } from './temporal';

/** The web project of releaseDefinition on a real worker, with sessions d1 (driver) and w1 (QA runner). */
export interface QaWorkflowFixture {
  t: TestDatabase;
  w: TestWorker;
  r: DeploymentRunActivities;
  stage: HttpTarget;
  repo: TestRepository;
  teardown(): Promise<void>;
}

export async function qaWorkflowFixture(): Promise<QaWorkflowFixture> {
  const t = await createTestDatabase();
  const w = await startTestWorker(t.db);
  const stage = await startHttpTarget();
  const repo = createTestRepository();
  const d = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: stage.url,
    prodUrl: 'https://web.example.test',
  });
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition({ ...d, repository: repo.dir }),
  });
  for (const id of ['d1', 'w1']) await sessionActivities({ db: t.db }).registerSession({ sessionId: id, actorId: id });
  const r = deploymentRunActivities({ db: t.db, takeoverNotifier: temporalTakeoverNotifier(w.client) });
  return {
    t,
    w,
    r,
    stage,
    repo,
    async teardown() {
      await stage.close();
      await w.shutdown();
      await t.drop();
    },
  };
}

/**
 * A run of WEB-1 driven by d1 and walked by its workflow to its QA stage, and w1's execution
 * of PLAN-7 there, its workflow waiting for the manual case's verdict.
 */
export async function executionWaitingForVerdict(
  fx: QaWorkflowFixture,
  run: { candidate: string; idempotencyKey: string },
): Promise<{
  runId: string;
  runHandle: WorkflowHandle<typeof deploymentRun>;
  executionId: number;
  execution: WorkflowHandle<typeof qaPlanExecution>;
}> {
  const { t, w, r } = fx;
  const created = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    items: ['WEB-1'],
    ...run,
  });
  await r.executeRun({ sessionId: 'd1', runId: created.run_id });
  const runHandle = await w.client.workflow.start<typeof deploymentRun>('deploymentRun', {
    workflowId: runWorkflowId(created.run_id),
    taskQueue: w.taskQueue,
    args: [{ runId: created.run_id }],
  });
  await until(
    () => runHandle.query(runState),
    (s) => s.waitingFor === 'qa',
    'the run to wait at QA',
  );
  const begun = await qaExecutionActivities({ db: t.db }).beginExecution({
    sessionId: 'w1',
    runId: created.run_id,
    stage: 'stage-qa',
    plan: 'PLAN-7',
    item: 'WEB-1',
  });
  const execution = await w.client.workflow.start<typeof qaPlanExecution>('qaPlanExecution', {
    workflowId: qaExecutionWorkflowId(begun.execution_id),
    taskQueue: w.taskQueue,
    args: [{ executionId: begun.execution_id, runId: begun.run_id, steps: begun.steps }],
  });
  await until(
    () => execution.query(executionState),
    (s) => s.phase === 'waiting_for_verdict',
    'the case to wait',
  );
  return { runId: created.run_id, runHandle, executionId: begun.execution_id, execution };
}
