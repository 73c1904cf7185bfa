import { sql } from 'kysely';
import type { Executor } from '../../db/pool';
import { runById, runFlow } from '../../db/runs';

/**
 * The "stage outstanding" reader (the seam QA stages wait on; Q5 will widen it to item QA):
 * a QA stage is settled when none of its blocking, unretracted run-level rows is pending.
 */
export async function stageOutstanding(
  db: Executor,
  runId: string,
  stageName: string,
): Promise<{ pending: string[]; failed: string[] }> {
  const rows = await db
    .selectFrom('deployment_run_qa')
    .select(['check_name', 'status'])
    .where('run_id', '=', runId)
    .where('stage_name', '=', stageName)
    .where('blocking', '=', true)
    .where('retracted_at', 'is', null)
    .orderBy('check_name')
    .execute();
  return {
    pending: rows.filter((r) => r.status === 'pending').map((r) => r.check_name),
    failed: rows.filter((r) => r.status === 'failed').map((r) => r.check_name),
  };
}

/**
 * What a holding run still has open (O2): `deploying: stage <name>` before its first QA
 * stage (or in a flow without one), else the QA lines still outstanding.
 */
export async function openLines(db: Executor, runId: string): Promise<string[]> {
  const run = await runById(db, runId);
  const flow = await runFlow(db, run);
  const firstQa = flow.stages.findIndex((s) => s.kind === 'qa');
  const stageName = run.current_stage ?? flow.stages[run.cursor_ordinal]?.name ?? flow.stages[0]!.name;
  if (firstQa < 0 || run.cursor_ordinal < firstQa) return [`deploying: stage ${stageName}`];
  const lines: string[] = [];
  for (const stage of flow.stages.filter((s) => s.kind === 'qa')) {
    const { pending } = await stageOutstanding(db, runId, stage.name);
    if (pending.length) lines.push(`qa: stage ${stage.name} awaits ${pending.join(', ')}`);
  }
  return lines.length ? lines : [`stage ${stageName}`];
}

/**
 * O1: once the cursor has reached the flow's QA stages and every one has settled, the run
 * stops occupying its origins (a flow without QA stages holds them until it is terminal).
 */
export async function releaseOccupancyIfSettled(db: Executor, runId: string): Promise<boolean> {
  const run = await runById(db, runId);
  if (run.occupancy_released_at || run.status !== 'executing') return false;
  const flow = await runFlow(db, run);
  const qa = flow.stages.map((s, ordinal) => ({ ...s, ordinal })).filter((s) => s.kind === 'qa');
  if (qa.length === 0 || run.cursor_ordinal < qa[0]!.ordinal) return false;
  const lastQa = qa[qa.length - 1]!;
  const stages = await db
    .selectFrom('deployment_run_stages')
    .select(['ordinal', 'status'])
    .where('run_id', '=', runId)
    .execute();
  if (stages.find((s) => s.ordinal === lastQa.ordinal)?.status !== 'passed') return false;
  for (const s of qa) if ((await stageOutstanding(db, runId, s.name)).pending.length) return false;
  await db
    .updateTable('deployment_runs')
    .set({ occupancy_released_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .execute();
  return true;
}
