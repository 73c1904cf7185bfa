import { randomInt, randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { sql } from 'kysely';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { sessionActivities } from '../../activities/sessions';
import { qaExecutionWorkflowId } from '../../workflows/definitions';
import { json, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { applyWebRelease, releaseRuns } from '../helpers/runs';

/**
 * Issue 11 Q1 under failure: `qa begin` writes the execution, then starts its workflow. A start
 * that fails must not leave a running execution that nothing walks; a begin repeated after a
 * lost answer must say that the first one runs.
 */
let t: TestDatabase;
let connection: Connection;
let client: Client;
let runId: string;
const taskQueue = `qa-begin-repeat-${randomUUID()}`; // no worker polls it: the workflows only need to exist
const started: string[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  connection = await Connection.connect({ address: process.env.YOKE_TEST_TEMPORAL_ADDRESS! });
  client = new Client({ connection });
  await applyWebRelease(t.db);
  for (const id of ['d1', 'w1']) await sessionActivities({ db: t.db }).registerSession({ sessionId: id, actorId: id });
  const r = deploymentRunActivities({ db: t.db });
  runId = await releaseRuns(() => r).waitingRun('b'.repeat(40), ['WEB-1']);
}, 60_000);

afterAll(async () => {
  for (const id of started)
    await client.workflow
      .getHandle(id)
      .terminate('test done')
      .catch(() => undefined);
  await connection.close();
  await t.drop();
});

/** Numbers this file's executions far from other files' (the dev server and its workflow ids are shared). */
async function nextExecutionId(): Promise<number> {
  const id = randomInt(1_500_000_000, 2_000_000_000);
  await sql`ALTER TABLE qa_plan_executions ALTER COLUMN execution_id RESTART WITH ${sql.lit(id)}`.execute(t.db);
  return id;
}

const begin = () =>
  yoke(
    t.url,
    ['qa', 'begin', '--run', runId, '--stage', 'stage-qa', '--plan', 'PLAN-7', '--item', 'WEB-1', '--session', 'w1'],
    { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: taskQueue },
  );

test('Q1 a qa begin repeated after a lost answer begins a second execution and says the first one runs, with how to keep one', async () => {
  const first = await nextExecutionId();
  const a = await begin();
  expect(a.code).toBe(0);
  expect(a.stderr).not.toContain('you already run');
  const b = await begin();
  expect(b.code).toBe(0);
  started.push(qaExecutionWorkflowId(first), qaExecutionWorkflowId(first + 1));
  expect(b.stderr).toContain(`you already run execution ${first} of plan PLAN-7 at stage-qa`);
  expect(b.stderr).toContain(`yoke qa watch ${first}`);
  expect(b.stderr).toContain(`yoke qa abort ${first + 1}`);
  const c = await yoke(t.url, ['qa', 'get', String(first + 1), '--json']);
  expect(json(c)).toMatchObject({ status: 'running' });
}, 60_000);

test('Q1 a qa begin whose workflow cannot start aborts the execution it wrote and says so (nothing left half-begun)', async () => {
  const next = await nextExecutionId();
  // a workflow already runs under the id the execution will get (a database recreated under a Temporal that kept its history)
  const workflowId = qaExecutionWorkflowId(next);
  await client.workflow.start('qaPlanExecution', {
    workflowId,
    taskQueue,
    args: [{ executionId: next, runId, steps: [] }],
  });
  started.push(workflowId);
  const r = await begin();
  expect(r.code).toBe(3);
  expect(r.stderr).toContain('qa_execution_not_started');
  expect(r.stderr).toContain(`execution ${next} was begun but its workflow ${workflowId} could not start`);
  expect(r.stderr).toContain('yoke qa begin --run');
  const row = await t.db
    .selectFrom('qa_plan_executions')
    .select(['status', 'release_reason'])
    .where('execution_id', '=', next)
    .executeTakeFirstOrThrow();
  expect(row.status).toBe('aborted');
  expect(row.release_reason).toMatch(/^workflow_not_started: /);
}, 60_000);
