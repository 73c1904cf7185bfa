import type { Command } from 'commander';
import { BaseOptions, commandAction, nonEmpty, type CommandContext } from '../context';
import { usageError } from '../../domain/errors';
import { table } from '../output';

const ViewOptions = BaseOptions.extend({ project: nonEmpty.optional() });

async function boardOf(ctx: CommandContext) {
  const { boardActivities } = await import('../../activities/board');
  return boardActivities({ db: ctx.db, driverFreshMs: await ctx.driverFreshMs() });
}

/** `yoke board`, `yoke fleet`, `yoke frontier`: views cut from one read and one schedule (U1). */
export function registerBoard(program: Command): void {
  program
    .command('board')
    .description('BOARD.md: Active Harness Sessions and Recent Sessions with the one Claims column (B1-B8)')
    .option('--project <project>', 'only sessions of this project (or holding its claims, or staffing its items)')
    .option('--out <file>', 'write the markdown to this file (for example BOARD.md)')
    .action(
      commandAction(
        ViewOptions.extend({ out: nonEmpty.optional() }),
        async (ctx, o) => {
          const { markdown, ...data } = await (await boardOf(ctx)).board({ project: o.project });
          if (o.out) {
            const { writeFileSync } = await import('node:fs');
            try {
              writeFileSync(o.out, `${markdown}\n`);
            } catch (err) {
              // A directory, a missing folder or a read-only place is the caller's input, not a bug.
              throw usageError('out_file_unwritable', `--out ${o.out}: ${(err as Error).message}`, {
                recovery: 'pass --out with a file path in an existing, writable folder, e.g. --out BOARD.md',
                details: { option: '--out', value: o.out },
              });
            }
          }
          return { markdown, data };
        },
        ({ markdown }, o) => (o.out ? `wrote ${o.out}` : markdown),
        ({ data }) => data,
      ),
    );

  program
    .command('fleet')
    .description('live sessions per machine and the work each staffs (from the one schedule, U1)')
    .option('--project <project>', 'only this project')
    .action(
      commandAction(
        ViewOptions,
        async (ctx, o) => (await boardOf(ctx)).fleet({ project: o.project }),
        (fleet) =>
          table(
            ['MACHINE', 'SESSION', 'ACTOR', 'PROJECT', 'STAFFING'],
            fleet.flatMap((m) =>
              m.sessions.map((s) => [m.machine_id, s.session_id, s.actor_id, s.project, s.staffing.join(' ') || '-']),
            ),
          ),
      ),
    );

  program
    .command('frontier')
    .description('items nobody staffs yet and not delivered (from the one schedule, U1)')
    .option('--project <project>', 'only this project')
    .action(
      commandAction(
        ViewOptions,
        async (ctx, o) => (await boardOf(ctx)).frontier({ project: o.project }),
        (frontier) =>
          table(
            ['ITEM', 'PROJECT'],
            frontier.map((f) => [f.item, f.project]),
          ),
      ),
    );
}
