import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { setLocalTimeouts } from '../../db/localTimeouts';
import type { Executor } from '../../db/pool';
import { qaStageOutstanding, type OutstandingRow } from '../../db/qaOutstanding';
import { runningMemberExecutions } from '../../db/qaExecutions';
import { runById, runFlow } from '../../db/runs';
import { stageStatuses } from '../../db/runStages';
import { failedQaRecovery, holdsCompletingStage, qaStageNotFound } from '../../domain/qaStages';
import { refusal } from '../../domain/errors';
import { qaBeginCommand } from '../../domain/qaPlan';

export { DEFAULT_QA_READ_DEADLINE_MS } from '../../domain/timeouts';

export interface QaPendingReport {
  run_id: string;
  status: string;
  stage_name: string | null;
  /**
   * Each waiting member once, with its blockers, and what to do next about a plan with no passed
   * execution (its own `qa begin ... --item`, memberRecovery), else null.
   */
  members: { item: string; stage_name: string | null; blockers: string[]; recovery: string | null }[];
  /** Unresolved blocking run obligations (pending, or failed). */
  run_obligations: { check_name: string; stage_name: string | null; status: string }[];
  /** Q4: the run-completing stage is held while anything here is pending. */
  held: boolean;
  /** The completing stage the hold keeps from starting. */
  completing_stage: string;
  /** True only when the combined report is empty. */
  nothing_outstanding: boolean;
  /** What to do next about a blocking obligation recorded failed (failedQaRecovery), else null. */
  recovery: string | null;
}

/**
 * Q1 Q4: a member of an item-scoped QA stage whose plan has no passed execution (its execution
 * failed, was aborted, or never began) moves on once one passes: the recovery names the
 * `qa begin` for that member (qaBeginCommand), one per such plan, from the plan ids the reader
 * returns (0053). Null when no plan is missing.
 */
function memberRecovery(runId: string, r: OutstandingRow, running: Map<string, number>): string | null {
  if (r.missing_plans.length === 0) {
    // Q3: a member's own check no plan is missing for (ITEM/check, its roll-up) is settled by a verdict on it
    const checks = r.blockers.filter((b) => b.startsWith(`${r.subject}/`));
    return checks.length
      ? checks
          .map(
            (c) => `record its verdict: yoke deployment-runs qa-verdict ${runId} --check ${c} --status passed|failed`,
          )
          .join('; ')
      : null;
  }
  if (r.stage_name === null) return null;
  // A plan the member's execution still runs needs no second one: it is followed instead.
  const follows = r.missing_plans.flatMap((plan) => {
    const id = running.get(`${r.stage_name}|${plan}|${r.subject}`);
    return id === undefined ? [] : [`follow execution ${id}: yoke qa watch ${id}`];
  });
  const begins = r.missing_plans
    .filter((plan) => !running.has(`${r.stage_name}|${plan}|${r.subject}`))
    .map((plan) => qaBeginCommand({ run_id: runId, stage: r.stage_name!, plan_id: plan, item: r.subject }));
  return [...follows, ...(begins.length ? [`begin a new execution: ${begins.join('; ')}`] : [])].join('; ');
}

function report(
  run: { run_id: string; status: string },
  stage: string | null,
  completing: string,
  rows: OutstandingRow[],
  completingNotStarted: boolean,
  stages: readonly { name: string; status: string }[],
  running: Map<string, number>,
): QaPendingReport {
  const members = rows
    .filter((r) => r.subject_kind === 'member')
    .map((r) => ({
      item: r.subject,
      stage_name: r.stage_name,
      blockers: r.blockers,
      recovery: memberRecovery(run.run_id, r, running),
    }));
  const obligations = rows
    .filter((r) => r.subject_kind === 'run_obligation')
    .map((r) => ({ check_name: r.subject, stage_name: r.stage_name, status: r.status }));
  const unresolved = rows.some(holdsCompletingStage);
  return {
    run_id: run.run_id,
    status: run.status,
    stage_name: stage,
    members,
    run_obligations: obligations,
    held: run.status === 'executing' && completingNotStarted && unresolved,
    completing_stage: completing,
    nothing_outstanding: rows.length === 0,
    recovery: failedQaRecovery(run, obligations, stages),
  };
}

/**
 * The blocking-QA read (Q4, Q5) in a fixed number of statements whatever the member count:
 * the run and its completing stage, then deployment_qa_stage_outstanding, under a read
 * deadline. A read past its deadline refuses read_deadline_exceeded.
 */
export async function readQaPending(
  db: Kysely<Database>,
  input: { runId: string; stage?: string | null },
  deadlineMs: number,
): Promise<QaPendingReport> {
  try {
    return await db.transaction().execute(async (trx) => {
      await setLocalTimeouts(trx, { statementTimeout: String(Math.max(1, Math.round(deadlineMs))) });
      return await readIn(trx, input);
    });
  } catch (err) {
    const code = (err as { code?: string }).code;
    // 42883 undefined_function: a control plane migrated before the reader existed, or with an
    // older signature (no stage_name) cannot give the held report; 42703 undefined_column: one
    // migrated before the reader named missing plans (0053).
    const message = (err as Error).message;
    if (
      (code === '42883' && /deployment_qa_stage_outstanding/.test(message)) ||
      (code === '42703' && /missing_plans/.test(message))
    ) {
      const diagnostic = (err as Error).message;
      throw refusal(
        'scoped_qa_report_unavailable',
        `the serving control plane has no blocking-QA report${input.stage ? ` for stage ${input.stage}` : ''} (deployment_qa_stage_outstanding): ${diagnostic}`,
        {
          recovery: `upgrade the control plane's schema: yoke db migrate (or npm start, which migrates), then rerun: yoke deployment-runs qa-pending ${input.runId}${input.stage ? ` --stage ${input.stage}` : ''}`,
          details: { run_id: input.runId, stage_name: input.stage ?? null, dispatch_diagnostic: diagnostic },
        },
      );
    }
    if (code === '57014') {
      throw refusal(
        'read_deadline_exceeded',
        `the blocking-QA read of run ${input.runId} ran past its ${deadlineMs} ms deadline`,
        {
          recovery: `rerun: yoke deployment-runs qa-pending ${input.runId}`,
          details: { run_id: input.runId, deadline_ms: deadlineMs },
        },
      );
    }
    throw err;
  }
}

async function readIn(db: Executor, input: { runId: string; stage?: string | null }): Promise<QaPendingReport> {
  const run = await runById(db, input.runId);
  const flow = await runFlow(db, run);
  const stage = input.stage ?? null;
  if (stage !== null && !flow.stages.some((s) => s.name === stage && s.kind === 'qa'))
    throw qaStageNotFound(run.run_id, flow.stages, stage);
  const last = flow.stages.length - 1;
  const completing = flow.stages[last]!.name;
  const stages = await stageStatuses(db, run.run_id);
  const statusOf = (ordinal: number) => stages.find((s) => s.ordinal === ordinal)?.status ?? 'pending';
  // Held: every earlier stage is done and the completing one has not started.
  const atCompleting =
    statusOf(last) === 'pending' && flow.stages.every((_, i) => i === last || statusOf(i) === 'passed');
  const rows = await qaStageOutstanding(db, run.run_id, stage);
  // one statement more, whatever the member count, and only when a member waits on a plan
  const running = rows.some((r) => r.missing_plans?.length)
    ? await runningMemberExecutions(db, run.run_id)
    : new Map<string, number>();
  const named = flow.stages.map((s, ordinal) => ({ name: s.name, status: statusOf(ordinal) }));
  return report(run, stage, completing, rows, atCompleting, named, running);
}

/**
 * The hold itself (Q4), for the run workflow: blocking QA anywhere on the run still pending, or
 * recorded failed (one failed after its stage passed must not let the completing stage start).
 */
export async function blockingQaUnresolved(db: Executor, runId: string): Promise<string[]> {
  return (await qaStageOutstanding(db, runId, null))
    .filter(holdsCompletingStage)
    .map((r) =>
      r.subject_kind === 'member'
        ? `${r.subject} (${r.blockers.join(', ')})`
        : r.status === 'failed'
          ? `${r.subject} (failed)`
          : r.subject,
    );
}

/** One line per unresolved obligation, as `watch` and `advance` print them. */
export function unresolvedLines(r: QaPendingReport): string[] {
  return [
    ...r.members.flatMap((m) => [
      `member ${m.item} at ${m.stage_name}: ${m.blockers.join('; ')}`,
      ...(m.recovery ? [`  next: ${m.recovery}`] : []),
    ]),
    ...r.run_obligations.map(
      (o) => `run obligation ${o.check_name}${o.stage_name ? ` at ${o.stage_name}` : ''}: ${o.status}`,
    ),
  ];
}
