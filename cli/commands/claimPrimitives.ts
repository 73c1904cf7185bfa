import type { Command } from 'commander';
import { z } from 'zod';
import { claimPrimitiveActivities } from '../../activities/claimPrimitives';
import { actingSession, BaseOptions, commandAction, nonEmpty } from '../context';
import { claimLine, claimsTable, takeJson, takeLine } from '../render';

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
    .action(
      commandAction(
        Acting,
        ({ db }, o, [item, task]) =>
          primitives(db).takeEpicTask({ sessionId: actingSession(o), item: item!, task: task! }),
        takeLine('took'),
        takeJson,
      ),
    );
  epic
    .command('release')
    .description('release your epic task claim')
    .argument('<PREFIX-N>')
    .argument('<TASK>', 'T###')
    .option('--reason <text>', 'why')
    .action(
      commandAction(
        Acting,
        ({ db }, o, [item, task]) =>
          primitives(db).releaseEpicTask({ sessionId: actingSession(o), item: item!, task: task!, reason: o.reason }),
        (c) => claimLine('released', c),
      ),
    );

  const processCmd = claims
    .command('process')
    .description('process claims: one live holder per project and process key');
  processCmd
    .command('take')
    .description('claim a process (rendered ⚙ KEY)')
    .argument('<KEY>', 'process key')
    .option('--project <project>', "project (default: the session's)")
    .action(
      commandAction(
        WithProject,
        ({ db }, o, [processKey]) =>
          primitives(db).takeProcess({ sessionId: actingSession(o), processKey: processKey!, project: o.project }),
        takeLine('took'),
        takeJson,
      ),
    );
  processCmd
    .command('release')
    .description('release your process claim')
    .argument('<KEY>', 'process key')
    .option('--project <project>', "project (default: the session's)")
    .option('--reason <text>', 'why')
    .action(
      commandAction(
        WithProject,
        ({ db }, o, [processKey]) =>
          primitives(db).releaseProcess({
            sessionId: actingSession(o),
            processKey: processKey!,
            project: o.project,
            reason: o.reason,
          }),
        (c) => claimLine('released', c),
      ),
    );

  const path = claims.command('path').description('path claims: one live holder per project and path');
  path
    .command('take')
    .description('claim paths, all or nothing; the declared path total is the number of paths')
    .argument('<PATH...>')
    .option('--item <PREFIX-N>', 'the item the paths are for')
    .option('--process <KEY>', 'the process the paths are for')
    .option('--project <project>', "project (default: the item's, else the session's)")
    .action(
      commandAction(
        PathOptions,
        ({ db }, o, paths) =>
          primitives(db).takePaths({
            sessionId: actingSession(o),
            paths,
            item: o.item,
            process: o.process,
            project: o.project,
          }),
        (r) =>
          `took ${r.declared_paths} path${r.declared_paths === 1 ? '' : 's'}${r.item ? ` for ${r.item}` : r.process_key ? ` for ⚙ ${r.process_key}` : ''} (claims ${r.claims.map((c) => c.claim_id).join(', ')})`,
      ),
    );
  path
    .command('release')
    .description('release your claims on these paths')
    .argument('<PATH...>')
    .option('--item <PREFIX-N>', 'only the claims recorded for this item')
    .option('--project <project>', "project (default: the item's, else the session's)")
    .option('--reason <text>', 'why')
    .action(
      commandAction(
        PathOptions,
        ({ db }, o, paths) =>
          primitives(db).releasePaths({
            sessionId: actingSession(o),
            paths,
            item: o.item,
            project: o.project,
            reason: o.reason,
          }),
        (released) => `released ${released.length} path claim${released.length === 1 ? '' : 's'}`,
      ),
    );
  registerPathList(path.command('list'));

  const doc = claims.command('doc').description('strategy-document locks: one live holder per project and document');
  const DocOptions = WithProject.extend({ project: nonEmpty });
  doc
    .command('lock')
    .description("lock a project's strategy document (folds into your steering seat on the board)")
    .argument('<DOC>', 'document name, for example MISSION')
    .requiredOption('--project <project>', 'project')
    .action(
      commandAction(
        DocOptions,
        ({ db }, o, [document]) =>
          primitives(db).lockDocument({ sessionId: actingSession(o), document: document!, project: o.project }),
        takeLine('locked'),
        takeJson,
      ),
    );
  doc
    .command('unlock')
    .description('unlock your strategy document lock')
    .argument('<DOC>', 'document name')
    .requiredOption('--project <project>', 'project')
    .option('--reason <text>', 'why')
    .action(
      commandAction(
        DocOptions,
        ({ db }, o, [document]) =>
          primitives(db).unlockDocument({
            sessionId: actingSession(o),
            document: document!,
            project: o.project,
            reason: o.reason,
          }),
        (c) => claimLine('unlocked', c),
      ),
    );
}

function registerPathList(cmd: Command): void {
  cmd
    .description('per-file detail of path claims (the board shows only totals)')
    .option('--item <PREFIX-N>', 'only this item')
    .option('--project <project>', 'only this project')
    .option('--active-only', 'only live claims')
    .action(
      commandAction(
        BaseOptions.extend({
          item: nonEmpty.optional(),
          project: nonEmpty.optional(),
          activeOnly: z.boolean().optional(),
        }),
        ({ db }, o) => primitives(db).listPathClaims({ item: o.item, project: o.project, activeOnly: o.activeOnly }),
        claimsTable,
      ),
    );
}

/** `yoke path-claims list --item PREFIX-N`, the drill-down the board's Claims column points to (B8). */
export function registerPathClaims(program: Command): void {
  registerPathList(program.command('path-claims').description('path claims, per file').command('list'));
}
