import { releaseOccupancy } from '../../db/occupancy';
import type { Executor } from '../../db/pool';
import { qaStageOutstanding } from '../../db/qaOutstanding';
import { runById, runFlow } from '../../db/runs';
import { stageStatuses } from '../../db/runStages';
import { holdsCompletingStage } from '../../domain/qaStages';

/**
 * What a QA stage still waits for, through the one reader (Q5, deployment_qa_stage_outstanding):
 * pending subjects (a waiting member once, a run obligation) and failed blocking obligations.
 */
export async function stageOutstanding(
  db: Executor,
  runId: string,
  stageName: string,
): Promise<{ pending: string[]; failed: string[] }> {
  const rows = await qaStageOutstanding(db, runId, stageName);
  return {
    pending: rows.filter((r) => r.status === 'pending').map((r) => r.subject),
    failed: rows.filter((r) => r.status === 'failed').map((r) => r.subject),
  };
}

/** O2: the open line of a holder whose every stage passed: it is settling (or its settlement is blocked). */
const SETTLING = 'settling: every stage passed';

/**
 * O2: the stage an occupying run is at, as its open line names it: an executing run whose
 * workflow has not begun its first stage yet (current_stage still unset) is at its cursor's
 * stage. None for a created run (a takeover's successor holding origins has deployed nothing).
 */
export async function occupyingStage(db: Executor, runId: string): Promise<string | null> {
  const run = await runById(db, runId);
  if (run.current_stage || run.status === 'created') return run.current_stage;
  return (await runFlow(db, run)).stages[run.cursor_ordinal]?.name ?? null;
}

/**
 * What a holding run still has open (O2): `deploying: stage <name>` before its first QA
 * stage (or in a flow without one), else the QA lines still outstanding.
 */
export async function openLines(db: Executor, runId: string): Promise<string[]> {
  const run = await runById(db, runId);
  const flow = await runFlow(db, run);
  // past its last stage (a flow without QA holds its origins until it is terminal): settling
  const stages = await stageStatuses(db, runId);
  const statusOf = (ordinal: number) => stages.find((s) => s.ordinal === ordinal)?.status ?? 'pending';
  if (flow.stages.every((_, i) => statusOf(i) === 'passed')) return [SETTLING];
  if (run.status === 'created') {
    // only a takeover's successor holds origins before it executes (T2): it has deployed nothing
    return [`waiting to execute, holding the origins of run ${run.supersedes_run_id ?? '(none)'} it took over`];
  }
  const firstQa = flow.stages.findIndex((s) => s.kind === 'qa');
  const stageName = run.current_stage ?? flow.stages[run.cursor_ordinal]?.name ?? flow.stages[0]!.name;
  const last = flow.stages.length - 1;
  // read once, by whichever line needs it first
  let read: ReturnType<typeof qaStageOutstanding> | undefined;
  const outstanding = () => (read ??= qaStageOutstanding(db, runId, null));
  // Q4, held as the QA reader judges it (pending.ts): every earlier stage passed, the completing one
  // (which the cursor has not entered) not started: the line says so, not that it is still deploying
  if (statusOf(last) === 'pending' && flow.stages.every((_, i) => i === last || statusOf(i) === 'passed')) {
    const held = (await outstanding()).filter(holdsCompletingStage).map((r) => r.subject);
    if (held.length) return [`held by blocking QA before stage ${flow.stages[last]!.name}: ${held.join(', ')}`];
  }
  if (firstQa < 0 || run.cursor_ordinal < firstQa) return [`deploying: stage ${stageName}`];
  const lines: string[] = [];
  const rows = (await outstanding()).filter((r) => r.status === 'pending');
  for (const stage of flow.stages.filter((s) => s.kind === 'qa')) {
    const pending = rows.filter((r) => r.stage_name === stage.name).map((r) => r.subject);
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
  const stages = await stageStatuses(db, runId);
  if (stages.find((s) => s.ordinal === lastQa.ordinal)?.status !== 'passed') return false;
  // Q5: the same reader as the QA wait and the held report.
  if ((await qaStageOutstanding(db, runId, null)).some((r) => r.status === 'pending')) return false;
  await releaseOccupancy(db, runId);
  return true;
}
