import type { Command } from 'commander';
import { z } from 'zod';
import { projectActivities } from '../../activities/projects';
import { PERMISSIONS } from '../../domain/permissions';
import { nonEmpty, parseOptions, withDb } from '../context';
import { emit, table } from '../output';

const Json = z.object({ json: z.boolean().optional() });

export function registerProjects(program: Command): void {
  const projects = program.command('projects').description('projects, their item prefixes and permissions');

  projects
    .command('create')
    .description('create a project (idempotent)')
    .argument('<name>', 'project name')
    .option('--prefix <PREFIX>', 'backlog item prefix (default: the name, upper-cased)')
    .option('--json', 'print JSON')
    .action(async (name: string, raw) => {
      const o = parseOptions(Json.extend({ prefix: nonEmpty.optional() }), raw);
      const r = await withDb(({ db }) => projectActivities({ db }).createProject({ name, itemPrefix: o.prefix }));
      emit(
        !!o.json,
        { ...r.project, created: r.created },
        () => `${r.created ? 'created' : 'exists:'} project ${r.project.name} (items ${r.project.item_prefix}-N)`,
      );
    });

  projects
    .command('grant')
    .description('grant an actor a permission on a project')
    .argument('<name>', 'project name')
    .requiredOption('--actor <actor>', 'actor id')
    .requiredOption('--permission <permission>', `permission (${PERMISSIONS.join(', ')})`)
    .option('--json', 'print JSON')
    .action(async (name: string, raw) => {
      const o = parseOptions(Json.extend({ actor: nonEmpty, permission: nonEmpty }), raw);
      const g = await withDb(({ db }) =>
        projectActivities({ db }).grantPermission({ project: name, actor: o.actor, permission: o.permission }),
      );
      emit(!!o.json, g, () => `granted ${g.permission} on ${g.project} to ${g.actor_id}`);
    });

  projects
    .command('list')
    .description('list projects')
    .option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(Json, raw);
      const rows = await withDb(({ db }) => projectActivities({ db }).listProjects());
      emit(!!o.json, rows, () =>
        table(
          ['PROJECT', 'PREFIX', 'CREATED'],
          rows.map((p) => [p.name, p.item_prefix, p.created_at]),
        ),
      );
    });
}
