import type { Command } from 'commander';
import { z } from 'zod';
import { actorActivities } from '../../activities/actors';
import { BaseOptions, commandAction, nonEmpty, parseArgument, type CommandContext } from '../context';
import { usageError } from '../../domain/errors';
import { table } from '../output';

const actorsOf = ({ db, config }: CommandContext) => actorActivities({ db, databaseUrl: config.databaseUrl });

/** `yoke actors`: issue 13, actors are Postgres login roles an admin adds and removes. */
export function registerActors(program: Command): void {
  const actors = program.command('actors').description('who may connect: Postgres login roles (admins manage them)');

  actors
    .command('add')
    .description('add an actor (a login role) and print its connection string')
    .argument('<name>', 'actor name, also its Postgres role: lowercase letters, digits, _ . -')
    .option('--admin', 'an admin: declares projects, grants, test machines, pricing; manages actors')
    .option('--agent', 'a coding agent (a user marked as an agent)')
    .option('--worker', 'a login for the Temporal worker (member of yoke_worker)')
    .action(
      commandAction(
        BaseOptions.extend({
          admin: z.boolean().optional(),
          agent: z.boolean().optional(),
          worker: z.boolean().optional(),
        }),
        (ctx, o, [name]) => {
          const kinds = (['admin', 'agent', 'worker'] as const).filter((k) => o[k]);
          if (kinds.length > 1) {
            throw usageError('invalid_argument', `--${kinds.join(' and --')} cannot be combined`, {
              recovery: 'choose one kind of actor',
              details: { kinds },
            });
          }
          return actorsOf(ctx).addActor({ actor: name!, kind: kinds[0] ?? 'user' });
        },
        (r) =>
          [
            `added ${r.kind} ${r.actor}; its connection string (shown once):`,
            `  DATABASE_URL=${r.connection_string}`,
          ].join('\n'),
      ),
    );

  actors
    .command('list')
    .description('list actors and their kind')
    .action(
      commandAction(
        BaseOptions,
        (ctx) => actorsOf(ctx).listActors(),
        (rows) =>
          table(
            ['ACTOR', 'KIND', 'LOGIN'],
            rows.map((a) => [a.actor, a.kind, a.can_login ? 'yes' : 'no']),
          ),
      ),
    );

  actors
    .command('remove')
    .description('remove an actor (drops its login role; its rows keep its name)')
    .argument('<name>', 'actor name')
    .action(
      commandAction(
        BaseOptions,
        (ctx, _o, [name]) => actorsOf(ctx).removeActor({ actor: parseArgument('name', nonEmpty, name) }),
        (r) => `removed ${r.actor}`,
      ),
    );

  actors
    .command('whoami')
    .description('the actor this connection acts as (its Postgres role)')
    .action(
      commandAction(
        BaseOptions,
        (ctx) => actorsOf(ctx).whoAmI(),
        (r) => `${r.actor} (${r.kind})`,
      ),
    );
}
