import type { Command } from 'commander';
import { z } from 'zod';
import { claimActivities } from '../../activities/claims';
import { actingSession, claimIdSchema, inHookContext, nonEmpty, parseOptions, withDb } from '../context';
import { emit, warn } from '../output';
import { claimLine, claimsTable } from '../render';

const AcquireOptions = z.object({ key: nonEmpty, project: nonEmpty.optional(), item: nonEmpty.optional(), session: nonEmpty.optional(), json: z.boolean().optional() });
const ListOptions = z.object({ key: nonEmpty.optional(), project: nonEmpty.optional(), activeOnly: z.boolean().optional(), json: z.boolean().optional() });
const ReleaseOptions = z.object({
  key: nonEmpty, claimId: claimIdSchema, holderSessionId: nonEmpty, reason: nonEmpty,
  project: nonEmpty.optional(), session: nonEmpty.optional(), json: z.boolean().optional(),
});


/**
 * `coordination-claim acquire|list|release`, mounted both at the top level and under
 * `claims` (the spec names both spellings).
 */
export function registerCoordinationClaim(parent: Command): void {
  const group = parent.command('coordination-claim').description('exclusive leases on shared resources addressed by operator keys (C2, C6)');

  group.command('acquire')
    .description('take LIVE_DB_MIGRATION:<model>, QA_HOST:<machine> or ROUTE_QUALIFICATION:<grant>')
    .requiredOption('--key <key>', 'operator key')
    .option('--project <project>', 'project (required for migration and route grants)')
    .option('--item <PREFIX-N>', 'owning item (required for LIVE_DB_MIGRATION)')
    .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
    .option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(AcquireOptions, raw);
      const sessionId = actingSession(o);
      const result = await withDb(async ({ db }) => claimActivities({ db }).acquireCoordinationClaim({ sessionId, key: o.key, project: o.project, item: o.item }));
      emit(!!o.json, { ...result.claim, reentered: result.reentered }, () => claimLine(result.reentered ? 'holding (re-entered)' : 'acquired', result.claim));
    });

  group.command('list')
    .description('list coordination claims; QA_HOST keys ignore --project (C7)')
    .option('--key <key>', 'only this operator key')
    .option('--project <project>', 'only this project (ignored for QA_HOST keys)')
    .option('--active-only', 'only live holds')
    .option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(ListOptions, raw);
      const rows = await withDb(async ({ db }) => claimActivities({ db }).listCoordinationClaims(o));
      emit(!!o.json, rows, () => claimsTable(rows));
    });

  group.command('release')
    .description('audited operator release of a reviewed hold (C8, C11)')
    .requiredOption('--key <key>', 'operator key of the hold')
    .requiredOption('--claim-id <n>', 'claim id of the reviewed row')
    .requiredOption('--holder-session-id <id>', 'session that holds it')
    .requiredOption('--reason <text>', 'why; kept on the claim row for good')
    .option('--project <project>', "holder's project (required except for QA_HOST keys)")
    .option('--session <id>', 'acting operator session (default $YOKE_SESSION_ID)')
    .option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(ReleaseOptions, raw);
      const actingSessionId = actingSession(o);
      const result = await withDb(async ({ db }) =>
        claimActivities({ db }).operatorRelease({
          actingSessionId, key: o.key, claimId: o.claimId, holderSessionId: o.holderSessionId,
          reason: o.reason, project: o.project, hookContext: inHookContext(),
        }),
      );
      if (result.operator_event_id) warn(!!o.json, `WARNOperatorLeaseRelease: ${o.key} claim ${o.claimId} of session ${o.holderSessionId} released by operator session ${actingSessionId} (event ${result.operator_event_id})`);
      emit(!!o.json, { ...result.claim, operator_event_id: result.operator_event_id }, () => claimLine('released', result.claim) + `\nreason: ${result.claim.release_reason}`);
    });
}
