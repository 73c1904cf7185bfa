import { deploymentRunActivities, type DeploymentRunActivities } from '../../activities/deploymentRuns';
import type { QaNotifier } from '../../activities/qa/ending';
import { qaExecutionActivities } from '../../activities/qa/executions';
import { sessionActivities } from '../../activities/sessions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf } from '../helpers/fixtures';
import { applyWebRelease, releaseRuns } from '../helpers/runs';

/**
 * Issues 11 and 12: a command whose answer was lost (its client died or timed out after the
 * commit) is run again. The repeat must not be refused as if something else had happened: it
 * says the change is already there, writes nothing more, and finishes what the first one may
 * not have (its signals).
 */
let t: TestDatabase;
let r: DeploymentRunActivities;
const told: string[] = [];
/** The after-commit port as Temporal would receive it; the test reads what was sent. */
const notifier: QaNotifier = {
  executionEnded: async (id, status) => void told.push(`ended ${id} ${status}`),
  runQaSettled: async (runId) => void told.push(`run ${runId}`),
  casesRecorded: async (id) => void told.push(`cases ${id}`),
};
const qa = () => qaExecutionActivities({ db: t.db, qaNotifier: notifier });

beforeEach(async () => {
  t = await createTestDatabase();
  await applyWebRelease(t.db);
  for (const id of ['d1', 'w1', 'w2'])
    await sessionActivities({ db: t.db }).registerSession({ sessionId: id, actorId: id });
  r = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
  told.length = 0;
});
afterEach(async () => {
  await t.drop();
});

const { waitingRun } = releaseRuns(() => r);

async function beganLook() {
  const runId = await waitingRun('a'.repeat(40), ['WEB-1']);
  const e = await qa().beginExecution({ sessionId: 'w1', runId, stage: 'stage-qa', plan: 'PLAN-7', item: 'WEB-1' });
  return { runId, executionId: e.execution_id };
}

test('issue 11 a repeated qa verdict whose first answer was lost after it ended the execution replays (recorded false), not qa_execution_settled', async () => {
  const { executionId } = await beganLook();
  const verdict = { executionId, case: 'look', verdict: 'passed' as const, sessionId: 'w1' };
  expect(await qa().recordHumanVerdict(verdict)).toMatchObject({ recorded: true, execution_status: 'running' });
  // the plan's last case: its workflow ends the execution as soon as it reads the verdict
  await qa().finishExecution({ executionId, status: 'passed', reason: 'every case passed or was waived' });

  const repeated = await qa().recordHumanVerdict(verdict);
  expect(repeated).toMatchObject({
    execution_id: executionId,
    case: 'look',
    verdict: 'passed',
    recorded: false,
    execution_status: 'passed',
  });
  const results = await t.db.selectFrom('qa_plan_execution_results').selectAll().execute();
  expect(results).toHaveLength(1);

  // what is not a repeat of the caller's own verdict is still refused: another verdict, another session
  expect((await refusalOf(qa().recordHumanVerdict({ ...verdict, verdict: 'failed' }))).code).toBe(
    'qa_execution_settled',
  );
  expect((await refusalOf(qa().recordHumanVerdict({ ...verdict, sessionId: 'w2' }))).code).toBe('qa_execution_settled');
});

test('W9 a repeated qa abort with the same reason replays (replayed true) and tells the workflow and the run again; another reason is refused', async () => {
  const { runId, executionId } = await beganLook();
  const first = await qa().abortExecution({ sessionId: 'w1', executionId, reason: 'wrong build' });
  expect(first).toMatchObject({ status: 'aborted', release_reason: 'wrong build', replayed: false });
  expect(told).toEqual([`ended ${executionId} aborted`, `run ${runId}`]);
  const events = async () =>
    (await t.db.selectFrom('events').select('event_type').execute()).map((e) => e.event_type).sort();
  const before = await events();

  // the first CLI died after its commit, before it signalled: the repeat signals
  told.length = 0;
  const repeated = await qa().abortExecution({ sessionId: 'w1', executionId, reason: 'wrong build' });
  expect(repeated).toMatchObject({ status: 'aborted', release_reason: 'wrong build', replayed: true, warnings: [] });
  expect(told).toEqual([`ended ${executionId} aborted`, `run ${runId}`]);
  expect(await events()).toEqual(before); // nothing written again

  const other = await refusalOf(qa().abortExecution({ sessionId: 'w1', executionId, reason: 'another reason' }));
  expect(other.code).toBe('qa_execution_settled');
});

test('issue 11 a verdict on an execution whose run has ended is refused qa_execution_settled naming no begin (one would be refused run_not_executing)', async () => {
  const { runId, executionId } = await beganLook();
  // terminalizing the run aborts its live executions (O4)
  await r.terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'abandoned' });
  const refused = await refusalOf(
    qa().recordHumanVerdict({ executionId, case: 'look', verdict: 'passed', sessionId: 'w1' }),
  );
  expect(refused).toMatchObject({
    code: 'qa_execution_settled',
    recovery: `nothing to record: run ${runId} is cancelled (see it: yoke qa get ${executionId})`,
  });
});
