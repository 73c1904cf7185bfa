import type { Command } from 'commander';
import { z } from 'zod';
import { claimActivities } from '../../activities/claims';
import { actingSession, BaseOptions, claimIdSchema, commandAction, inHookContext, nonEmpty } from '../context';
import { claimLine, claimsTable } from '../render';
import { registerClaimPrimitives } from './claimPrimitives';
import { registerCoordinationClaim, releaseJson, reportRelease } from './coordinationClaim';

const SteeringOptions = BaseOptions.extend({ project: nonEmpty, reason: nonEmpty.optional() });
const ItemOptions = BaseOptions.extend({ reason: nonEmpty.optional() });
const WorkReleaseOptions = BaseOptions.extend({ claimId: claimIdSchema, reason: nonEmpty });
const ListOptions = BaseOptions.extend({
  holderSessionId: nonEmpty.optional(),
  project: nonEmpty.optional(),
  activeOnly: z.boolean().optional(),
});

export function registerClaims(program: Command): void {
  const claims = program
    .command('claims')
    .description('work claims held by sessions: steering seats, items, coordination holds');

  const steering = claims.command('steering').description("a project's steering seat (one live seat per project)");
  steering
    .command('take')
    .description('take the steering seat of a project')
    .requiredOption('--project <project>', 'project')
    .action(
      commandAction(
        SteeringOptions,
        ({ db, line }, o) =>
          claimActivities({ db, line }).takeSteeringSeat({ sessionId: actingSession(o), project: o.project }),
        (r) => claimLine(r.reentered ? 'holding' : 'took', r.claim),
        (r) => ({ ...r.claim, reentered: r.reentered }),
      ),
    );
  steering
    .command('release')
    .description('give up your steering seat')
    .requiredOption('--project <project>', 'project')
    .option('--reason <text>', 'why')
    .action(
      commandAction(
        SteeringOptions,
        ({ db, line }, o) =>
          claimActivities({ db, line }).releaseSteeringSeat({
            sessionId: actingSession(o),
            project: o.project,
            reason: o.reason,
          }),
        (c) => claimLine('released', c),
      ),
    );

  const item = claims.command('item').description('backlog item claims (one live holder per item)');
  item
    .command('take')
    .description('claim a backlog item')
    .argument('<PREFIX-N>', 'item')
    .action(
      commandAction(
        ItemOptions,
        ({ db, line }, o, [ref]) => claimActivities({ db, line }).takeItem({ sessionId: actingSession(o), item: ref! }),
        (r) => claimLine(r.reentered ? 'holding' : 'took', r.claim),
        (r) => ({ ...r.claim, reentered: r.reentered }),
      ),
    );
  item
    .command('release')
    .description('release your claim on a backlog item')
    .argument('<PREFIX-N>', 'item')
    .option('--reason <text>', 'why')
    .action(
      commandAction(
        ItemOptions,
        ({ db, line }, o, [ref]) =>
          claimActivities({ db, line }).releaseItem({ sessionId: actingSession(o), item: ref!, reason: o.reason }),
        (c) => claimLine('released', c),
      ),
    );

  const work = claims.command('work').description('claims addressed by id');
  work
    .command('release')
    .description('release a claim by id (C9; C12 for pre-retirement DEPLOY: holds)')
    .requiredOption('--claim-id <n>', 'claim id')
    .requiredOption('--reason <text>', 'why; kept on the claim row')
    .action(
      commandAction(
        WorkReleaseOptions,
        async ({ db, line }, o) => {
          const actingSessionId = actingSession(o);
          const r = await claimActivities({ db, line }).releaseWorkClaim({
            actingSessionId,
            claimId: o.claimId,
            reason: o.reason,
            hookContext: inHookContext(),
          });
          return reportRelease(
            !!o.json,
            r,
            `WARNOperatorLeaseRelease: claim ${o.claimId} of session ${r.claim.session_id} released by operator session ${actingSessionId}`,
          );
        },
        (r) => claimLine('released', r.claim),
        releaseJson,
      ),
    );

  claims
    .command('list')
    .description('list claims of every kind')
    .option('--holder-session-id <id>', 'only claims of this session')
    .option('--project <project>', 'only claims recorded on this project')
    .option('--active-only', 'only live claims')
    .action(
      commandAction(
        ListOptions,
        ({ db, line }, o) =>
          claimActivities({ db, line }).listClaims({
            sessionId: o.holderSessionId,
            project: o.project,
            activeOnly: o.activeOnly,
          }),
        claimsTable,
      ),
    );

  registerCoordinationClaim(claims);
  registerClaimPrimitives(claims);
}
