import type { Command } from 'commander';
import { z } from 'zod';
import { claimActivities } from '../../activities/claims';
import { actingSession, claimIdSchema, inHookContext, nonEmpty, parseOptions, withDb, BaseOptions } from '../context';
import { emit, warn } from '../output';
import { claimLine, claimsTable } from '../render';
import { registerClaimPrimitives } from './claimPrimitives';
import { registerCoordinationClaim, reportLine } from './coordinationClaim';

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
    .action(async (raw) => {
      const o = parseOptions(SteeringOptions, raw);
      const sessionId = actingSession(o);
      const r = await withDb(({ db, line }) =>
        claimActivities({ db, line }).takeSteeringSeat({ sessionId, project: o.project }),
      );
      emit(!!o.json, { ...r.claim, reentered: r.reentered }, () =>
        claimLine(r.reentered ? 'holding' : 'took', r.claim),
      );
    });
  steering
    .command('release')
    .description('give up your steering seat')
    .requiredOption('--project <project>', 'project')
    .option('--reason <text>', 'why')
    .action(async (raw) => {
      const o = parseOptions(SteeringOptions, raw);
      const sessionId = actingSession(o);
      const c = await withDb(({ db, line }) =>
        claimActivities({ db, line }).releaseSteeringSeat({ sessionId, project: o.project, reason: o.reason }),
      );
      emit(!!o.json, c, () => claimLine('released', c));
    });

  const item = claims.command('item').description('backlog item claims (one live holder per item)');
  item
    .command('take')
    .description('claim a backlog item')
    .argument('<PREFIX-N>', 'item')
    .action(async (ref: string, raw) => {
      const o = parseOptions(ItemOptions, raw);
      const sessionId = actingSession(o);
      const r = await withDb(({ db, line }) => claimActivities({ db, line }).takeItem({ sessionId, item: ref }));
      emit(!!o.json, { ...r.claim, reentered: r.reentered }, () =>
        claimLine(r.reentered ? 'holding' : 'took', r.claim),
      );
    });
  item
    .command('release')
    .description('release your claim on a backlog item')
    .argument('<PREFIX-N>', 'item')
    .option('--reason <text>', 'why')
    .action(async (ref: string, raw) => {
      const o = parseOptions(ItemOptions, raw);
      const sessionId = actingSession(o);
      const c = await withDb(({ db, line }) =>
        claimActivities({ db, line }).releaseItem({ sessionId, item: ref, reason: o.reason }),
      );
      emit(!!o.json, c, () => claimLine('released', c));
    });

  const work = claims.command('work').description('claims addressed by id');
  work
    .command('release')
    .description('release a claim by id (C9; C12 for pre-retirement DEPLOY: holds)')
    .requiredOption('--claim-id <n>', 'claim id')
    .requiredOption('--reason <text>', 'why; kept on the claim row')
    .action(async (raw) => {
      const o = parseOptions(WorkReleaseOptions, raw);
      const actingSessionId = actingSession(o);
      const r = await withDb(({ db, line }) =>
        claimActivities({ db, line }).releaseWorkClaim({
          actingSessionId,
          claimId: o.claimId,
          reason: o.reason,
          hookContext: inHookContext(),
        }),
      );
      if (r.operator_event_id)
        warn(
          !!o.json,
          `WARNOperatorLeaseRelease: claim ${o.claimId} of session ${r.claim.session_id} released by operator session ${actingSessionId}`,
        );
      reportLine(!!o.json, r);
      emit(!!o.json, { ...r.claim, operator_event_id: r.operator_event_id, reservations: r.reservations }, () =>
        claimLine('released', r.claim),
      );
    });

  claims
    .command('list')
    .description('list claims of every kind')
    .option('--holder-session-id <id>', 'only claims of this session')
    .option('--project <project>', 'only claims recorded on this project')
    .option('--active-only', 'only live claims')
    .action(async (raw) => {
      const o = parseOptions(ListOptions, raw);
      const rows = await withDb(({ db, line }) =>
        claimActivities({ db, line }).listClaims({
          sessionId: o.holderSessionId,
          project: o.project,
          activeOnly: o.activeOnly,
        }),
      );
      emit(!!o.json, rows, () => claimsTable(rows));
    });

  registerCoordinationClaim(claims);
  registerClaimPrimitives(claims);
}
