import { jsonError } from '../helpers/cli';
import { webReleaseCliFile } from '../helpers/runs';

// Temporal answers (approve wakes the run's workflow after its write); no worker is needed here.
const { db, run, runs, createdRun } = webReleaseCliFile(['d1', 'd2']);

const driverOf = async (runId: string) =>
  (
    await db()
      .selectFrom('deployment_runs')
      .select('driver_session_id')
      .where('run_id', '=', runId)
      .executeTakeFirstOrThrow()
  ).driver_session_id;

test('issue 4 R1: heartbeat on a cancelled run refuses run_cancelled (it never moves again) and attaches no driver, even past a live one; get shows its last driver not live', async () => {
  const runId = await createdRun('abcdef1234', ['WEB-1']);
  // d1 drives it, live (as its execute would make it; a heartbeat no longer seizes a created run)
  await db()
    .updateTable('deployment_runs')
    .set({ driver_session_id: 'd1', driver_heartbeat_at: new Date() })
    .where('run_id', '=', runId)
    .execute();
  await runs().terminalizeRun({ sessionId: 'd1', runId, disposition: 'cancelled', reason: 'not this one' });
  for (const session of ['d1', 'd2']) {
    const refused = await run(['deployment-runs', 'heartbeat', runId, '--json'], session);
    expect(refused.code).toBe(1);
    // not run_driven_elsewhere: no session could drive it
    expect(jsonError(refused)).toMatchObject({
      code: 'run_cancelled',
      details: { run_id: runId, status: 'cancelled' },
    });
  }
  expect(await driverOf(runId)).toBe('d1');
  // R1: the cancelled run's last driver is not shown live, whatever its last heartbeat
  const got = await run(['deployment-runs', 'get', runId, '--json'], 'd1');
  expect(JSON.parse(got.stdout).driver).toMatchObject({ session_id: 'd1', live: false });
  expect((await run(['deployment-runs', 'get', runId], 'd1')).stdout).toContain('driver: d1 (lapsed)');
});

test('issue 4 R1: a failed run still takes its driver heartbeat, since it may retry', async () => {
  const runId = await createdRun('abcdef5678', ['WEB-1']);
  await runs().terminalizeRun({ sessionId: 'd1', runId, disposition: 'failed', reason: 'broke' });
  const beat = await run(['deployment-runs', 'heartbeat', runId], 'd1');
  expect(beat.code).toBe(0);
  expect(beat.stdout).toContain(`${runId} driven by d1`);
});

test('issue 11 R1: approving an approval stage that no longer waits (approved already) is a refusal, exit 1; naming no approval stage stays a usage error, exit 2', async () => {
  const r = runs();
  const { run_id: runId } = await r.createRun({
    sessionId: 'd1',
    project: 'web',
    flow: 'release',
    target: 'stage',
    candidate: 'abcdef9abc',
    idempotencyKey: 'approve-twice',
    items: ['WEB-2'],
  });
  await r.executeRun({ sessionId: 'd1', runId });
  const { stages } = await r.loadRunPlan({ runId });
  for (const stage of stages) {
    await r.beginStage({ runId, ordinal: stage.ordinal, walk: 1 });
    if (stage.kind === 'approval') break;
    await r.finishStage({ runId, ordinal: stage.ordinal, walk: 1, result: { ok: true, detail: 'test' } });
  }
  expect((await run(['deployment-runs', 'approve', runId, '--stage', 'signoff'], 'd1')).code).toBe(0);
  // the run's workflow passes the approved stage and moves on (done here as it would)
  const signoff = stages.find((x) => x.kind === 'approval')!;
  await r.finishStage({ runId, ordinal: signoff.ordinal, walk: 1, result: { ok: true, detail: 'approved' } });
  const again = await run(['deployment-runs', 'approve', runId, '--stage', 'signoff', '--json'], 'd1');
  expect(again.code).toBe(1);
  expect(jsonError(again)).toMatchObject({
    code: 'stage_not_awaiting_approval',
    details: { run_id: runId, stage: 'signoff', status: 'passed' },
  });
  const unknown = await run(['deployment-runs', 'approve', runId, '--stage', 'no-such-stage', '--json'], 'd1');
  expect(unknown.code).toBe(2);
  expect(jsonError(unknown).code).toBe('stage_not_awaiting_approval');
});
