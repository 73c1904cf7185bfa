import { sql } from 'kysely';
import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { temporalQaNotifier } from '../../temporal/qaSignals';
import { executionState, qaExecutionWorkflowId, runState, runWorkflowId } from '../../workflows/definitions';
import type { deploymentRun } from '../../workflows/deploymentRun';
import type { qaPlanExecution } from '../../workflows/qaPlanExecution';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { createTestRepository, type TestRepository } from '../helpers/git';
import { releaseDefinition, startHttpTarget, writeDefinition, type HttpTarget } from '../helpers/runs';
import { startTestWorker, until, type TestWorker } from '../helpers/temporal';

/**
 * Issue 13: a QA plan execution's verdicts are rows the CLI writes under its caller's role.
 * The workflow is only nudged; it reads what Postgres recorded, so a message that carries a
 * verdict (a forged signal, the old update) records nothing and moves nothing.
 */
let t: TestDatabase;
let w: TestWorker;
let r: DeploymentRunActivities;
let stage: HttpTarget;
let repo: TestRepository;

beforeAll(async () => {
  t = await createTestDatabase();
  // Workflow ids are deterministic (deployment-run/run-N, qa-plan-execution/N) and the dev server
  // is shared by the test files running beside this one: this file numbers its own far away.
  await sql`ALTER SEQUENCE deployment_run_numbers RESTART WITH 730001`.execute(t.db);
  await sql`ALTER TABLE qa_plan_executions ALTER COLUMN execution_id RESTART WITH 730001`.execute(t.db);
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
  r = deploymentRunActivities({ db: t.db });
}, 60_000);

afterAll(async () => {
  await stage.close();
  await w.shutdown();
  await t.drop();
});

test('I13 a bare signal or update carrying a verdict records nothing; the recorded row is what the workflow reads', async () => {
  const run = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: repo.A,
    idempotencyKey: 'forged',
    items: ['WEB-1'],
  });
  await r.executeRun({ sessionId: 'd1', runId: run.run_id });
  const runFlow = await w.client.workflow.start<typeof deploymentRun>('deploymentRun', {
    workflowId: runWorkflowId(run.run_id),
    taskQueue: w.taskQueue,
    args: [{ runId: run.run_id }],
  });
  await until(
    () => runFlow.query(runState),
    (s) => s.waitingFor === 'qa',
    'the run to wait at QA',
  );
  const qa = qaExecutionActivities({ db: t.db, qaNotifier: temporalQaNotifier(w.client) });
  const begun = await qa.beginExecution({
    sessionId: 'w1',
    runId: run.run_id,
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

  const forged = { case: 'look', verdict: 'passed', sessionId: 'w1', runId: run.run_id };
  await execution.signal('casesRecorded', forged);
  await execution.signal('recordVerdict', forged);
  await execution.signal('waiveCase', { case: 'look', reason: 'forged', sessionId: 'd1' });
  // The old updates are gone: refused by the workflow, after it handled the signals sent before them.
  await expect(execution.executeUpdate('recordVerdict', { args: [forged] })).rejects.toThrow();
  await expect(execution.executeUpdate('waiveCase', { args: [forged] })).rejects.toThrow();
  expect(await execution.query(executionState)).toMatchObject({ phase: 'waiting_for_verdict', step: 'look' });
  const results = () =>
    t.db
      .selectFrom('qa_plan_execution_results')
      .select(['case_name', 'verdict', 'recorded_by_session_id'])
      .where('execution_id', '=', begun.execution_id)
      .execute();
  expect(await results()).toEqual([]);
  const row = await t.db
    .selectFrom('qa_plan_executions')
    .select('status')
    .where('execution_id', '=', begun.execution_id)
    .executeTakeFirstOrThrow();
  expect(row.status).toBe('running');

  // Recorded in Postgres (the CLI's path), the nudge wakes the workflow, which reads it and ends.
  await qa.recordHumanVerdict({ executionId: begun.execution_id, case: 'look', verdict: 'passed', sessionId: 'w1' });
  expect(await execution.result()).toMatchObject({ outcome: 'passed' });
  expect(await results()).toEqual([{ case_name: 'look', verdict: 'passed', recorded_by_session_id: 'w1' }]);
}, 90_000);
