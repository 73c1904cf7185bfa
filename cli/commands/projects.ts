import type { Command } from 'commander';
import { projectActivities } from '../../activities/projects';
import { PERMISSIONS } from '../../domain/permissions';
import { commandAction, nonEmpty, BaseOptions } from '../context';
import { table } from '../output';

export function registerProjects(program: Command): void {
  const projects = program.command('projects').description('projects, their item prefixes and permissions');

  projects
    .command('create')
    .description('create a project (idempotent)')
    .argument('<name>', 'project name')
    .option('--prefix <PREFIX>', 'backlog item prefix (default: the name, upper-cased)')
    .action(
      commandAction(
        BaseOptions.extend({ prefix: nonEmpty.optional() }),
        ({ db }, o, [name]) => projectActivities({ db }).createProject({ name: name!, itemPrefix: o.prefix }),
        (r) => `${r.created ? 'created' : 'exists:'} project ${r.project.name} (items ${r.project.item_prefix}-N)`,
        (r) => ({ ...r.project, created: r.created }),
      ),
    );

  projects
    .command('grant')
    .description('grant an actor a permission on a project')
    .argument('<name>', 'project name')
    .requiredOption('--actor <actor>', 'actor id')
    .requiredOption('--permission <permission>', `permission (${PERMISSIONS.join(', ')})`)
    .action(
      commandAction(
        BaseOptions.extend({ actor: nonEmpty, permission: nonEmpty }),
        ({ db }, o, [name]) =>
          projectActivities({ db }).grantPermission({ project: name!, actor: o.actor, permission: o.permission }),
        (g) =>
          [
            `granted ${g.permission} on ${g.project} to ${g.actor_id}`,
            ...g.warnings.map((w) => `warning: ${w.message}`),
          ].join('\n'),
      ),
    );

  projects
    .command('list')
    .description('list projects')
    .action(
      commandAction(
        BaseOptions,
        ({ db }) => projectActivities({ db }).listProjects(),
        (rows) =>
          table(
            ['PROJECT', 'PREFIX', 'CREATED'],
            rows.map((p) => [p.name, p.item_prefix, p.created_at]),
          ),
      ),
    );
}
