import type { Command } from 'commander';
import { nonEmpty, parseOptions, withDb, type CommandContext, BaseOptions } from '../context';
import { emit, table } from '../output';

const ViewOptions = BaseOptions.extend({ project: nonEmpty.optional() });

async function boardOf(ctx: CommandContext) {
  const { boardActivities } = await import('../../activities/board');
  return boardActivities({ db: ctx.db, driverFreshMs: ctx.config.driverFreshMs });
}

/** `yoke board`, `yoke fleet`, `yoke frontier`: views cut from one read and one schedule (U1). */
export function registerBoard(program: Command): void {
  program
    .command('board')
    .description('BOARD.md: Active Harness Sessions and Recent Sessions with the one Claims column (B1-B8)')
    .option('--project <project>', 'only sessions of this project (or holding its claims)')
    .option('--out <file>', 'write the markdown to this file (for example BOARD.md)')
    .action(async (raw) => {
      const o = parseOptions(ViewOptions.extend({ out: nonEmpty.optional() }), raw);
      const board = await withDb(async (ctx) => (await boardOf(ctx)).board({ project: o.project }));
      const { markdown, ...data } = board;
      if (o.out) {
        const { writeFileSync } = await import('node:fs');
        writeFileSync(o.out, `${markdown}\n`);
      }
      emit(!!o.json, data, () => (o.out ? `wrote ${o.out}` : markdown));
    });

  program
    .command('fleet')
    .description('live sessions per machine and the work each staffs (from the one schedule, U1)')
    .option('--project <project>', 'only this project')
    .action(async (raw) => {
      const o = parseOptions(ViewOptions, raw);
      const fleet = await withDb(async (ctx) => (await boardOf(ctx)).fleet({ project: o.project }));
      emit(!!o.json, fleet, () =>
        table(
          ['MACHINE', 'SESSION', 'ACTOR', 'PROJECT', 'STAFFING'],
          fleet.flatMap((m) =>
            m.sessions.map((s) => [m.machine_id, s.session_id, s.actor_id, s.project, s.staffing.join(' ') || '-']),
          ),
        ),
      );
    });

  program
    .command('frontier')
    .description('items nobody staffs yet and not delivered (from the one schedule, U1)')
    .option('--project <project>', 'only this project')
    .action(async (raw) => {
      const o = parseOptions(ViewOptions, raw);
      const frontier = await withDb(async (ctx) => (await boardOf(ctx)).frontier({ project: o.project }));
      emit(!!o.json, frontier, () =>
        table(
          ['ITEM', 'PROJECT'],
          frontier.map((f) => [f.item, f.project]),
        ),
      );
    });
}
