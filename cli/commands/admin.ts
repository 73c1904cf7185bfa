import type { Command } from 'commander';
import { readEvents } from '../../activities/auditLog';
import { applyMigrations } from '../../activities/schema';
import { claimIdSchema, commandAction, nonEmpty, BaseOptions } from '../context';
import { table } from '../output';

/** `yoke events` (the audit log) and `yoke db migrate`. */
export function registerAdmin(program: Command): void {
  program
    .command('events')
    .description('the audit event log')
    .command('list')
    .description('list events, oldest first')
    .option('--type <type>', 'only this event type, e.g. WARNOperatorLeaseRelease')
    .option('--claim-id <n>', 'only events about this claim')
    .action(
      commandAction(
        BaseOptions.extend({ type: nonEmpty.optional(), claimId: claimIdSchema.optional() }),
        ({ db }, o) => readEvents(db, { type: o.type, claimId: o.claimId }),
        (rows) =>
          table(
            ['EVENT', 'TYPE', 'CLAIM', 'SESSION', 'AT'],
            rows.map((e) => [e.event_id, e.event_type, e.claim_id, e.session_id, e.created_at]),
          ),
      ),
    );

  program
    .command('db')
    .description('the yoke database')
    .command('migrate')
    .description('bring the schema to the latest migration')
    .action(
      commandAction(
        BaseOptions,
        async ({ db }) => ({ applied: await applyMigrations(db) }),
        ({ applied }) => (applied.length ? `applied ${applied.join(', ')}` : 'schema is up to date'),
      ),
    );
}
