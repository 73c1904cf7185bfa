import { qaExecutionActivities } from '../../activities/qa/executions';
import { temporalQaNotifier } from '../../temporal/qaSignals';
import { RUN_STATUS_KEY } from '../../workflows/definitions';
import { executionWaitingForVerdict, qaWorkflowFixture, type QaWorkflowFixture } from '../helpers/qaWorkflow';

let fx: QaWorkflowFixture;

beforeAll(async () => {
  fx = await qaWorkflowFixture();
}, 60_000);

afterAll(async () => {
  await fx.teardown();
});

test('T2 after commit the predecessor workflow ends superseded (YokeRunStatus) and the moved execution continues under the successor', async () => {
  const { t, w, r, repo } = fx;
  const {
    runId: predRunId,
    runHandle: run,
    executionId,
    execution,
  } = await executionWaitingForVerdict(fx, {
    candidate: repo.A,
    idempotencyKey: 'pred',
  });
  const pred = { run_id: predRunId };
  const begun = { execution_id: executionId };

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
  ).rejects.toMatchObject({
    code: 'qa_execution_wrong_run',
    // T2: the refusal says the execution moved with the takeover and repeats under the successor
    message: expect.stringContaining(
      `it moved to run ${succ.run_id} with the takeover of run ${pred.run_id} (chain ${pred.run_id} -> ${succ.run_id})`,
    ),
    recovery: `repeat it with --run ${succ.run_id} (or without --run)`,
  });
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
