import type { Command } from 'commander';
import { YokeError } from '../../domain/errors';
import { parseOptions, withDb, BaseOptions } from '../context';
import { emit } from '../output';

/**
 * `yoke doctor [--json]`: runs the invariant queries against Postgres and the run workflows
 * in Temporal; exits 1 naming each violation with its recovery (0 when all hold, 3 when a
 * service is unreachable).
 */
export function registerDoctor(program: Command): void {
  program
    .command('doctor')
    .description('check the invariants that must hold after any crash or outage; exit 1 naming each violation')
    .action(async (raw) => {
      const o = parseOptions(BaseOptions, raw);
      const report = await withDb(async (ctx) => {
        const { doctorActivities } = await import('../../activities/doctor');
        const { describeExecutionWorkflow, temporalRunWorkflows } = await import('../../temporal/runWorkflows');
        const client = await ctx.temporal.get();
        const workflows = temporalRunWorkflows(client, ctx.config.taskQueue);
        return doctorActivities({
          db: ctx.db,
          workflows,
          executionWorkflowStatus: (id) => describeExecutionWorkflow(client, id),
        }).checkInvariants();
      });
      if (!report.ok) {
        if (o.json) process.stdout.write(`${JSON.stringify(report)}\n`);
        throw new YokeError(
          'refusal',
          'invariant_violated',
          report.violations.map((v) => `[${v.invariant}] ${v.message}`).join('\n'),
          report.violations.map((v) => `${v.subject}: ${v.recovery}`).join('\n'),
          { violations: report.violations },
        );
      }
      emit(!!o.json, report, () => `ok: ${report.checked.length} invariants hold (${report.checked.join(', ')})`);
    });
}
