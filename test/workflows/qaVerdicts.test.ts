import { sql } from 'kysely';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { temporalQaNotifier } from '../../temporal/qaSignals';
import { casesRecorded, executionState } from '../../workflows/definitions';
import { executionWaitingForVerdict, qaWorkflowFixture, type QaWorkflowFixture } from '../helpers/qaWorkflow';

/**
 * Issue 13: a QA plan execution's verdicts are rows the CLI writes under its caller's role.
 * The workflow is only nudged; it reads what Postgres recorded, so a message that carries a
 * verdict (a forged signal, the old update) records nothing and moves nothing.
 */
let fx: QaWorkflowFixture;

beforeAll(async () => {
  fx = await qaWorkflowFixture();
  // Workflow ids are deterministic (deployment-run/run-N, qa-plan-execution/N) and the dev server
  // is shared by the test files running beside this one: this file numbers its own far away.
  await sql`ALTER SEQUENCE deployment_run_numbers RESTART WITH 730001`.execute(fx.t.db);
  await sql`ALTER TABLE qa_plan_executions ALTER COLUMN execution_id RESTART WITH 730001`.execute(fx.t.db);
}, 60_000);

afterAll(async () => {
  await fx.teardown();
});

test('I13 a bare signal or update carrying a verdict records nothing; the recorded row is what the workflow reads', async () => {
  const { t, w, repo } = fx;
  const { runId, executionId, execution } = await executionWaitingForVerdict(fx, {
    candidate: repo.A,
    idempotencyKey: 'forged',
  });
  const qa = qaExecutionActivities({ db: t.db, qaNotifier: temporalQaNotifier(w.client) });

  const forged = { case: 'look', verdict: 'passed', sessionId: 'w1', runId: runId };
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
      .where('execution_id', '=', executionId)
      .execute();
  expect(await results()).toEqual([]);
  const row = await t.db
    .selectFrom('qa_plan_executions')
    .select('status')
    .where('execution_id', '=', executionId)
    .executeTakeFirstOrThrow();
  expect(row.status).toBe('running');

  // Recorded in Postgres (the CLI's path), the nudge wakes the workflow, which reads it and ends.
  await qa.recordHumanVerdict({ executionId: executionId, case: 'look', verdict: 'passed', sessionId: 'w1' });
  expect(await execution.result()).toMatchObject({ outcome: 'passed' });
  expect(await results()).toEqual([{ case_name: 'look', verdict: 'passed', recorded_by_session_id: 'w1' }]);
}, 90_000);

test('W9 issue 10 an execution ended while its end signal was lost (the aborting command died after its commit): the workflow reads the end at its next re-read and finishes aborted', async () => {
  const { t, r, repo } = fx;
  // the run above still occupies the stage origin
  for (const { run_id } of await t.db
    .selectFrom('deployment_runs')
    .select('run_id')
    .where('status', '=', 'executing')
    .execute())
    await r.terminalizeRun({ sessionId: 'd1', runId: run_id, disposition: 'cancelled', reason: 'next scenario' });
  const { runId, executionId, execution } = await executionWaitingForVerdict(fx, {
    candidate: repo.B,
    idempotencyKey: 'lost-end',
  });
  // Postgres records the abort; no executionEnded signal reaches the workflow.
  await qaExecutionActivities({ db: t.db }).abortExecution({ sessionId: 'w1', executionId, reason: 'wrong build' });
  expect(await execution.query(executionState)).toMatchObject({ phase: 'waiting_for_verdict', step: 'look' });
  // Any re-read (here a nudge; else the slow safety timer) reads the end, and the workflow finishes.
  await execution.signal(casesRecorded);
  let timer: NodeJS.Timeout | undefined;
  const ended = await Promise.race([
    execution.result(),
    new Promise<null>((done) => (timer = setTimeout(() => done(null), 30_000))),
  ]).finally(() => clearTimeout(timer));
  expect(ended).toMatchObject({ outcome: 'aborted' });
  await r.terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'scenario done' });
}, 120_000);
