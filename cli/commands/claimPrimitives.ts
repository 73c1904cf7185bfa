import type { Command } from 'commander';
import { z } from 'zod';
import { claimPrimitiveActivities } from '../../activities/claimPrimitives';
import { actingSession, nonEmpty, parseOptions, withDb, BaseOptions } from '../context';
import { emit } from '../output';
import { claimLine, claimsTable } from '../render';

const Acting = BaseOptions.extend({ reason: nonEmpty.optional() });
const WithProject = Acting.extend({ project: nonEmpty.optional() });
const PathOptions = WithProject.extend({ item: nonEmpty.optional(), process: nonEmpty.optional() });

const primitives = (db: Parameters<typeof claimPrimitiveActivities>[0]['db']) => claimPrimitiveActivities({ db });

/**
 * `yoke claims epic-task|process|path|doc ...`: every claim primitive the board shows can be
 * taken and released (B1), each exclusive by its own index.
 */
export function registerClaimPrimitives(claims: Command): void {
  const epic = claims.command('epic-task').description('epic task claims: one live holder per item and task (T###)');
  epic
    .command('take')
    .description('claim an epic task')
    .argument('<PREFIX-N>')
    .argument('<TASK>', 'T###')
    .action(async (item: string, task: string, raw) => {
      const o = parseOptions(Acting, raw);
      const sessionId = actingSession(o);
      const r = await withDb(({ db }) => primitives(db).takeEpicTask({ sessionId, item, task }));
      emit(!!o.json, { ...r.claim, reentered: r.reentered }, () =>
        claimLine(r.reentered ? 'holding' : 'took', r.claim),
      );
    });
  epic
    .command('release')
    .description('release your epic task claim')
    .argument('<PREFIX-N>')
    .argument('<TASK>', 'T###')
    .option('--reason <text>', 'why')
    .action(async (item: string, task: string, raw) => {
      const o = parseOptions(Acting, raw);
      const sessionId = actingSession(o);
      const c = await withDb(({ db }) => primitives(db).releaseEpicTask({ sessionId, item, task, reason: o.reason }));
      emit(!!o.json, c, () => claimLine('released', c));
    });

  const processCmd = claims
    .command('process')
    .description('process claims: one live holder per project and process key');
  processCmd
    .command('take')
    .description('claim a process (rendered ⚙ KEY)')
    .argument('<KEY>', 'process key')
    .option('--project <project>', "project (default: the session's)")
    .action(async (processKey: string, raw) => {
      const o = parseOptions(WithProject, raw);
      const sessionId = actingSession(o);
      const r = await withDb(({ db }) => primitives(db).takeProcess({ sessionId, processKey, project: o.project }));
      emit(!!o.json, { ...r.claim, reentered: r.reentered }, () =>
        claimLine(r.reentered ? 'holding' : 'took', r.claim),
      );
    });
  processCmd
    .command('release')
    .description('release your process claim')
    .argument('<KEY>', 'process key')
    .option('--project <project>', "project (default: the session's)")
    .option('--reason <text>', 'why')
    .action(async (processKey: string, raw) => {
      const o = parseOptions(WithProject, raw);
      const sessionId = actingSession(o);
      const c = await withDb(({ db }) =>
        primitives(db).releaseProcess({ sessionId, processKey, project: o.project, reason: o.reason }),
      );
      emit(!!o.json, c, () => claimLine('released', c));
    });

  const path = claims.command('path').description('path claims: one live holder per project and path');
  path
    .command('take')
    .description('claim paths, all or nothing; the declared path total is the number of paths')
    .argument('<PATH...>')
    .option('--item <PREFIX-N>', 'the item the paths are for')
    .option('--process <KEY>', 'the process the paths are for')
    .option('--project <project>', "project (default: the item's, else the session's)")
    .action(async (paths: string[], raw) => {
      const o = parseOptions(PathOptions, raw);
      const sessionId = actingSession(o);
      const r = await withDb(({ db }) =>
        primitives(db).takePaths({ sessionId, paths, item: o.item, process: o.process, project: o.project }),
      );
      emit(
        !!o.json,
        r,
        () =>
          `took ${r.declared_paths} path${r.declared_paths === 1 ? '' : 's'}${r.item ? ` for ${r.item}` : r.process_key ? ` for ⚙ ${r.process_key}` : ''} (claims ${r.claims.map((c) => c.claim_id).join(', ')})`,
      );
    });
  path
    .command('release')
    .description('release your claims on these paths')
    .argument('<PATH...>')
    .option('--item <PREFIX-N>', 'only the claims recorded for this item')
    .option('--project <project>', "project (default: the item's, else the session's)")
    .option('--reason <text>', 'why')
    .action(async (paths: string[], raw) => {
      const o = parseOptions(PathOptions, raw);
      const sessionId = actingSession(o);
      const released = await withDb(({ db }) =>
        primitives(db).releasePaths({ sessionId, paths, item: o.item, project: o.project, reason: o.reason }),
      );
      emit(!!o.json, released, () => `released ${released.length} path claim${released.length === 1 ? '' : 's'}`);
    });
  registerPathList(path.command('list'));

  const doc = claims.command('doc').description('strategy-document locks: one live holder per project and document');
  doc
    .command('lock')
    .description("lock a project's strategy document (folds into your steering seat on the board)")
    .argument('<DOC>', 'document name, for example MISSION')
    .requiredOption('--project <project>', 'project')
    .action(async (document: string, raw) => {
      const o = parseOptions(WithProject.extend({ project: nonEmpty }), raw);
      const sessionId = actingSession(o);
      const r = await withDb(({ db }) => primitives(db).lockDocument({ sessionId, document, project: o.project }));
      emit(!!o.json, { ...r.claim, reentered: r.reentered }, () =>
        claimLine(r.reentered ? 'holding' : 'locked', r.claim),
      );
    });
  doc
    .command('unlock')
    .description('unlock your strategy document lock')
    .argument('<DOC>', 'document name')
    .requiredOption('--project <project>', 'project')
    .option('--reason <text>', 'why')
    .action(async (document: string, raw) => {
      const o = parseOptions(WithProject.extend({ project: nonEmpty }), raw);
      const sessionId = actingSession(o);
      const c = await withDb(({ db }) =>
        primitives(db).unlockDocument({ sessionId, document, project: o.project, reason: o.reason }),
      );
      emit(!!o.json, c, () => claimLine('unlocked', c));
    });
}

function registerPathList(cmd: Command): void {
  cmd
    .description('per-file detail of path claims (the board shows only totals)')
    .option('--item <PREFIX-N>', 'only this item')
    .option('--project <project>', 'only this project')
    .option('--active-only', 'only live claims')
    .action(async (raw) => {
      const o = parseOptions(
        BaseOptions.extend({
          item: nonEmpty.optional(),
          project: nonEmpty.optional(),
          activeOnly: z.boolean().optional(),
        }),
        raw,
      );
      const rows = await withDb(({ db }) =>
        primitives(db).listPathClaims({ item: o.item, project: o.project, activeOnly: o.activeOnly }),
      );
      emit(!!o.json, rows, () => claimsTable(rows));
    });
}

/** `yoke path-claims list --item PREFIX-N`, the drill-down the board's Claims column points to (B8). */
export function registerPathClaims(program: Command): void {
  registerPathList(program.command('path-claims').description('path claims, per file').command('list'));
}
