import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { temporalQaNotifier } from '../../temporal/qaSignals';
import { temporalTakeoverNotifier } from '../../temporal/takeoverSignals';
import {
  executionState,
  qaExecutionWorkflowId,
  RUN_STATUS_KEY,
  runState,
  runWorkflowId,
} from '../../workflows/definitions';
import type { deploymentRun } from '../../workflows/deploymentRun';
import type { qaPlanExecution } from '../../workflows/qaPlanExecution';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { createTestRepository, type TestRepository } from '../helpers/git';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startTestWorker, until, type TestWorker } from '../helpers/temporal';

let t: TestDatabase;
let w: TestWorker;
let r: DeploymentRunActivities;
let stage: HttpTarget;
let repo: TestRepository;

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  stage = await startHttpTarget();
  repo = createTestRepository();
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
  r = deploymentRunActivities({ db: t.db, takeoverNotifier: temporalTakeoverNotifier(w.client) });
}, 60_000);

afterAll(async () => {
  await stage.close();
  await w.shutdown();
  await t.drop();
});

test('T2 after commit the predecessor workflow ends superseded (YokeRunStatus) and the moved execution continues under the successor', async () => {
  const pred = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: repo.A,
    idempotencyKey: 'pred',
    items: ['WEB-1'],
  });
  await r.executeRun({ sessionId: 'd1', runId: pred.run_id });
  const run = await w.client.workflow.start<typeof deploymentRun>('deploymentRun', {
    workflowId: runWorkflowId(pred.run_id),
    taskQueue: w.taskQueue,
    args: [{ runId: pred.run_id }],
  });
  await until(
    () => run.query(runState),
    (s) => s.waitingFor === 'qa',
    'the run to wait at QA',
  );

  const begun = await qaExecutionActivities({ db: t.db }).beginExecution({
    sessionId: 'w1',
    runId: pred.run_id,
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

  const succ = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: repo.C,
    idempotencyKey: 'succ',
    items: [],
  });
  const done = await r.takeoverRun({ sessionId: 'd1', runId: pred.run_id, successorRunId: succ.run_id });
  expect(done).toMatchObject({ live_executions: [begun.execution_id], warnings: [] });

  expect(await run.result()).toEqual({ status: 'superseded' });
  expect((await run.describe()).typedSearchAttributes.get(RUN_STATUS_KEY)).toBe('superseded');

  // the same execution id continues: a verdict naming the predecessor is now the wrong run
  const qa = qaExecutionActivities({ db: t.db, qaNotifier: temporalQaNotifier(w.client) });
  await expect(
    qa.recordHumanVerdict({
      executionId: begun.execution_id,
      case: 'look',
      verdict: 'passed',
      sessionId: 'w1',
      runId: pred.run_id,
    }),
  ).rejects.toMatchObject({ code: 'qa_execution_wrong_run' });
  // recorded in Postgres (as the CLI does), the workflow only nudged to read it
  await qa.recordHumanVerdict({
    executionId: begun.execution_id,
    case: 'look',
    verdict: 'passed',
    sessionId: 'w1',
    runId: succ.run_id,
  });
  expect(await execution.result()).toMatchObject({ outcome: 'passed' });
  const after = await qaExecutionActivities({ db: t.db }).getExecution({ executionId: begun.execution_id });
  expect(after).toMatchObject({ run_id: succ.run_id, status: 'passed', verdict_run_id: succ.run_id });
  expect(after.steps[0]).toMatchObject({ verdict: 'passed', verdict_run_id: succ.run_id });
}, 90_000);
