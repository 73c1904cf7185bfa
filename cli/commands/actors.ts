import type { Command } from 'commander';
import { z } from 'zod';
import { actorActivities } from '../../activities/actors';
import { nonEmpty, parseOptions, withDb, BaseOptions } from '../context';
import { emit, table } from '../output';

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
    .action(async (name: string, raw) => {
      const o = parseOptions(
        BaseOptions.extend({
          admin: z.boolean().optional(),
          agent: z.boolean().optional(),
          worker: z.boolean().optional(),
        }),
        raw,
      );
      const kinds = (['admin', 'agent', 'worker'] as const).filter((k) => o[k]);
      if (kinds.length > 1) {
        const { usageError } = await import('../../domain/errors');
        throw usageError('invalid_argument', `--${kinds.join(' and --')} cannot be combined`, {
          recovery: 'choose one kind of actor',
          details: { kinds },
        });
      }
      const r = await withDb(({ db, config }) =>
        actorActivities({ db, databaseUrl: config.databaseUrl }).addActor({ actor: name, kind: kinds[0] ?? 'user' }),
      );
      emit(!!o.json, r, () =>
        [
          `added ${r.kind} ${r.actor}; its connection string (shown once):`,
          `  DATABASE_URL=${r.connection_string}`,
        ].join('\n'),
      );
    });

  actors
    .command('list')
    .description('list actors and their kind')
    .action(async (raw) => {
      const o = parseOptions(BaseOptions, raw);
      const rows = await withDb(({ db, config }) =>
        actorActivities({ db, databaseUrl: config.databaseUrl }).listActors(),
      );
      emit(!!o.json, rows, () =>
        table(
          ['ACTOR', 'KIND', 'LOGIN'],
          rows.map((a) => [a.actor, a.kind, a.can_login ? 'yes' : 'no']),
        ),
      );
    });

  actors
    .command('remove')
    .description('remove an actor (drops its login role; its rows keep its name)')
    .argument('<name>', 'actor name')
    .action(async (name: string, raw) => {
      const o = parseOptions(BaseOptions.extend({ name: nonEmpty }), { ...raw, name });
      const r = await withDb(({ db, config }) =>
        actorActivities({ db, databaseUrl: config.databaseUrl }).removeActor({ actor: o.name }),
      );
      emit(!!o.json, r, () => (r.removed ? `removed ${r.actor}` : `no actor ${r.actor}; nothing to remove`));
    });

  actors
    .command('whoami')
    .description('the actor this connection acts as (its Postgres role)')
    .action(async (raw) => {
      const o = parseOptions(BaseOptions, raw);
      const r = await withDb(({ db, config }) => actorActivities({ db, databaseUrl: config.databaseUrl }).whoAmI());
      emit(!!o.json, r, () => `${r.actor}${r.admin ? ' (admin)' : ''}`);
    });
}
