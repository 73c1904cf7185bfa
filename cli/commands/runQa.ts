import type { Command } from 'commander';
import { z } from 'zod';
import type { QaPendingReport } from '../../activities/qa/pending';
import { actingSession, BaseOptions, commandAction, nonEmpty, parseOptions, withDb } from '../context';
import { refusal } from '../../domain/errors';
import { holdsCompletingStage } from '../../domain/qaStages';
import { emit } from '../output';

async function lines(r: QaPendingReport): Promise<string[]> {
  const { unresolvedLines } = await import('../../activities/qa/pending');
  return unresolvedLines(r);
}

/** A blocking obligation recorded failed: what to do next, as `next:` (the JSON carries it as recovery). */
function nextLines(r: QaPendingReport): string[] {
  return r.recovery ? [`next: ${r.recovery}`] : [];
}

/** `deployment-runs qa add`, `qa-pending` and `advance`: run-level QA and the Q4 hold. */
export function registerRunQa(dr: Command): void {
  const qaGroup = dr.command('qa').description("a run's QA obligations");
  qaGroup
    .command('add')
    .description('add an operator QA check to a run (Q3); a blocking one names its stage (Q6)')
    .argument('<run>', 'run id')
    .requiredOption('--check <name>', 'check name')
    .option('--stage <stage>', 'the QA stage that answers it')
    .option('--non-blocking', 'record it without holding the run')
    .action(
      commandAction(
        BaseOptions.extend({ check: nonEmpty, stage: nonEmpty.optional(), nonBlocking: z.boolean().optional() }),
        async (ctx, o, [runId]) => {
          const { runObligationActivities } = await import('../../activities/qa/runObligations');
          return runObligationActivities({ db: ctx.db, driverFreshMs: await ctx.driverFreshMs() }).addRunQa({
            sessionId: actingSession(o),
            runId: runId!,
            check: o.check,
            stage: o.stage,
            blocking: !o.nonBlocking,
          });
        },
        (r) =>
          `${r.run_id} QA check ${r.check_name} at ${r.stage_name ?? '(no stage)'}: ${r.blocking ? 'blocking' : 'non-blocking'}`,
      ),
    );

  dr.command('qa-pending')
    .description(
      "what the run's QA still owes, through one reader (Q5): waiting members with blockers, run obligations",
    )
    .argument('<run>', 'run id')
    .option('--stage <stage>', "only this QA stage's subjects (plus run obligations naming no stage)")
    .action(async (runId: string, raw) => {
      const o = parseOptions(BaseOptions.extend({ stage: nonEmpty.optional() }), raw);
      const r = await withDb(async (ctx) =>
        (await import('../blockingQa')).readBlockingQa(
          ctx,
          runId,
          o.stage ?? null,
          `yoke deployment-runs qa-pending ${runId}${o.stage ? ` --stage ${o.stage}` : ''}`,
        ),
      );
      const text = await lines(r);
      emit(!!o.json, r, () =>
        r.nothing_outstanding
          ? `run ${r.run_id}: nothing outstanding${r.stage_name ? ` at ${r.stage_name}` : ''}`
          : [
              `run ${r.run_id}${r.held ? ` is held before ${r.completing_stage}` : ''}:`,
              ...text.map((l) => `  ${l}`),
              ...nextLines(r),
            ].join('\n'),
      );
    });

  dr.command('advance')
    .description('advance a run held by blocking QA (Q4): exits 5 naming every unresolved obligation while any is')
    .argument('<run>', 'run id')
    .action(async (runId: string, raw) => {
      const o = parseOptions(BaseOptions, raw);
      const r = await withDb(async (ctx) => {
        const report = await (
          await import('../blockingQa')
        ).readBlockingQa(ctx, runId, null, `yoke deployment-runs advance ${runId}`);
        // A created run has no stage to hold: its QA is owed, but nothing waits on it yet (Q4);
        // a cancelled or succeeded one has nothing left to advance; a failed one is not advanced
        // either (exit 1, not 0), and is told its next step (its failed QA, or a retry).
        if (report.status !== 'executing') {
          throw refusal(
            'run_not_executing',
            `run ${runId} is ${report.status}; only an executing run is held by blocking QA`,
            {
              recovery:
                report.status === 'created'
                  ? `execute it first: yoke deployment-runs execute ${runId}`
                  : report.status === 'failed' && report.recovery
                    ? report.recovery
                    : `nothing to advance; see it: yoke deployment-runs get ${runId}`,
              details: { run_id: runId, status: report.status },
            },
          );
        }
        // Q4: the rule `held` and the workflow's hold read (pending, or failed at a QA stage)
        const unresolved = report.members.length > 0 || report.run_obligations.some(holdsCompletingStage);
        if (!unresolved) await ctx.temporal.qaNotifier().runQaSettled(runId);
        return { ...report, advanced: !unresolved };
      });
      const text = await lines(r);
      emit(!!o.json, r, () =>
        [
          ...(r.advanced
            ? [
                // told to go on, which need not mean it moves now: an approval stage still waits for its approver
                `run ${r.run_id}: no blocking QA outstanding; its workflow is told to go on (follow it: yoke deployment-runs watch ${r.run_id})`,
              ]
            : text.length
              ? [
                  // Q4's hold is before the completing stage; a run still at an earlier QA stage waits there
                  r.held
                    ? `run ${r.run_id} is held by blocking QA before ${r.completing_stage}:`
                    : `run ${r.run_id} waits on blocking QA (not yet at ${r.completing_stage}):`,
                  ...text.map((l) => `  ${l}`),
                ]
              : [`run ${r.run_id} is ${r.status}`]),
          ...nextLines(r),
        ].join('\n'),
      );
      if (!r.advanced && text.length) process.exitCode = 5;
    });
}
