import type { Command } from 'commander';
import { z } from 'zod';
import { claimActivities, type AcquireResult, type ReleaseResult } from '../../activities/claims';
import { usageError, YokeError } from '../../domain/errors';
import { OPERATOR_KEY_HELP, parseOperatorKey } from '../../domain/operatorKeys';
import { actingSession, BaseOptions, claimIdSchema, commandAction, inHookContext, nonEmpty, seconds } from '../context';
import { warn } from '../output';
import { claimLine, claimsTable } from '../render';

const AcquireOptions = BaseOptions.extend({
  key: nonEmpty,
  project: nonEmpty.optional(),
  item: nonEmpty.optional(),
  wait: z.boolean().optional(),
  waitTimeout: seconds.pipe(z.number().positive()).optional(),
});
const ListOptions = BaseOptions.extend({
  key: nonEmpty.optional(),
  project: nonEmpty.optional(),
  activeOnly: z.boolean().optional(),
});
const ReleaseOptions = BaseOptions.extend({
  key: nonEmpty,
  claimId: claimIdSchema,
  holderSessionId: nonEmpty,
  reason: nonEmpty,
  project: nonEmpty.optional(),
});

function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_./:@=,+-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/**
 * W4: the command a waiter runs to take its turn is the one it ran to join, naming its session
 * when YOKE_SESSION_ID gave it: from another shell the command must still act as that session.
 */
export function resumeCommand(argv: string[] = process.argv, sessionId?: string): string {
  const args = argv.slice(2);
  const named = args.some((a) => a === '--session' || a.startsWith('--session='));
  return ['yoke', ...args, ...(sessionId && !named ? ['--session', sessionId] : [])].map(shellQuote).join(' ');
}

/** Prints what a release did to the waiting line, and any signal that could not be sent. */
export function reportLine(json: boolean, result: Pick<ReleaseResult, 'reservations' | 'warnings'>): void {
  for (const r of result.reservations)
    warn(
      json,
      `reserved QA_HOST:${r.test_machine} for session ${r.session_id} (claim ${r.claim_id}) until ${r.reserved_until}`,
    );
  for (const w of result.warnings) warn(json, `warning: ${w}`);
}

/**
 * The end of a release that may be an operator's (C8, C9): WARNOperatorLeaseRelease when an
 * operator released it, then the waiting line's report.
 */
export function reportRelease(json: boolean, result: ReleaseResult, operatorWarning: string): ReleaseResult {
  if (result.operator_event_id) warn(json, operatorWarning);
  reportLine(json, result);
  return result;
}

/** A release's JSON: the claim, the operator event (or null) and the turns it reserved. */
export function releaseJson(r: ReleaseResult) {
  return { ...r.claim, operator_event_id: r.operator_event_id, reservations: r.reservations };
}

function acquiredLine(r: AcquireResult): string {
  return claimLine(
    r.consumed_reservation ? 'took your reserved turn:' : r.reentered ? 'holding (re-entered)' : 'acquired',
    r.claim,
  );
}

/**
 * `coordination-claim acquire|list|release`, mounted both at the top level and under
 * `claims` (the spec names both spellings).
 */
export function registerCoordinationClaim(parent: Command): void {
  const group = parent
    .command('coordination-claim')
    .description('exclusive leases on shared resources addressed by operator keys (C2, C6)');

  group
    .command('acquire')
    .description(
      "take LIVE_DB_MIGRATION:<model>, QA_HOST:<machine> or ROUTE_QUALIFICATION:<grant>; a refused QA_HOST acquire joins the machine's waiting line",
    )
    .requiredOption('--key <key>', OPERATOR_KEY_HELP)
    .option('--project <project>', 'project (required for migration and route grants)')
    .option('--item <PREFIX-N>', 'owning item (required for LIVE_DB_MIGRATION)')
    .option('--wait', 'for QA_HOST keys: wait in line until your turn is reserved, then take it')
    .option('--wait-timeout <seconds>', 'with --wait: give up waiting after this long (you keep your place)')
    .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
    .action(
      commandAction(
        AcquireOptions,
        async (ctx, o) => {
          if (o.waitTimeout !== undefined && !o.wait) {
            // W4: the stored resume_command must not carry a bound the command never applied.
            throw usageError('invalid_argument', '--wait-timeout applies only with --wait, and --wait was not given', {
              recovery: 'add --wait to wait in line for at most that long, or drop --wait-timeout',
              details: { option: '--wait-timeout' },
            });
          }
          const key = parseOperatorKey(o.key);
          if (o.wait && key.kind !== 'qa_admission' && key.kind !== 'deploy_serialization') {
            // W4: only a test machine has a waiting line; a held migration or grant is refused at once
            // (a DEPLOY: key goes on to its own refusal, deploy_lock_retired)
            throw usageError('invalid_argument', `--wait applies only to QA_HOST keys; ${o.key} has no waiting line`, {
              recovery: `drop --wait: a held ${o.key} is refused claim_held naming its holder, and is taken once released`,
              details: { option: '--wait', key: o.key },
            });
          }
          const sessionId = actingSession(o);
          const join =
            key.kind === 'qa_admission' ? { resumeCommand: resumeCommand(process.argv, sessionId) } : undefined;
          const claims = claimActivities({ db: ctx.db, line: ctx.line });
          const acquire = () =>
            claims.acquireCoordinationClaim({ sessionId, key: o.key, project: o.project, item: o.item, join });
          // W7 W9: a process waiting for its turn is its session alive, from its first acquire
          // (joining may wait on Temporal) until it took the turn or gave up; else the stale-session
          // sweep would end the session and cancel the wait it is in.
          const stopHeartbeat = o.wait
            ? (await import('../sessionKeepAlive')).keepSessionAlive(ctx, sessionId)
            : async () => undefined;
          const result = await acquire()
            .catch(async (err: unknown) => {
              if (!(err instanceof YokeError) || !err.details.wait || key.kind !== 'qa_admission') throw err;
              const wait = err.details.wait as { position: number };
              if (!o.wait) {
                // W8: an unhealthy host reserves no turn until a verification passes, so waiting
                // alone never ends: the hint names the verify that serves the line.
                const unhealthy =
                  err.code === 'test_machine_unhealthy'
                    ? `; the machine is unhealthy, so no turn is reserved until a verification (or a golden capture) passes: once it is fixed, yoke test-machine verify ${key.testMachine} --session ${sessionId}`
                    : '';
                throw new YokeError(
                  err.kind,
                  err.code,
                  err.message,
                  `you are number ${wait.position} in line${unhealthy}; take your turn when it is reserved with: ${join!.resumeCommand} (or add --wait)`,
                  err.details,
                );
              }
              warn(!!o.json, `${err.message}`);
              const { waitForTurn } = await import('../waitForTurn');
              return waitForTurn(
                ctx,
                {
                  testMachine: key.testMachine,
                  sessionId,
                  json: !!o.json,
                  resumeCommand: join!.resumeCommand,
                  timeoutMs: o.waitTimeout !== undefined ? o.waitTimeout * 1000 : undefined,
                },
                acquire,
              );
            })
            .finally(stopHeartbeat);
          for (const w of result.warnings) warn(!!o.json, `warning: ${w}`);
          return result;
        },
        acquiredLine,
        (r) => ({ ...r.claim, reentered: r.reentered, consumed_reservation: r.consumed_reservation }),
      ),
    );

  group
    .command('list')
    .description('list coordination claims; QA_HOST keys ignore --project (C7)')
    .option('--key <key>', `only this key; ${OPERATOR_KEY_HELP}`)
    .option('--project <project>', 'only this project (ignored for QA_HOST keys)')
    .option('--active-only', 'only live holds')
    .action(
      commandAction(
        ListOptions,
        ({ db, line }, o) => claimActivities({ db, line }).listCoordinationClaims(o),
        claimsTable,
      ),
    );

  group
    .command('release')
    .description('audited operator release of a reviewed hold (C8, C11)')
    .requiredOption('--key <key>', `the hold's ${OPERATOR_KEY_HELP}`)
    .requiredOption('--claim-id <n>', 'claim id of the reviewed row')
    .requiredOption('--holder-session-id <id>', 'session that holds it')
    .requiredOption('--reason <text>', 'why; kept on the claim row for good')
    .option('--project <project>', "holder's project (required except for QA_HOST keys)")
    .option('--session <id>', 'acting operator session (default $YOKE_SESSION_ID)')
    .action(
      commandAction(
        ReleaseOptions,
        async ({ db, line }, o) => {
          const actingSessionId = actingSession(o);
          const result = await claimActivities({ db, line }).operatorRelease({
            actingSessionId,
            key: o.key,
            claimId: o.claimId,
            holderSessionId: o.holderSessionId,
            reason: o.reason,
            project: o.project,
            hookContext: inHookContext(),
          });
          return reportRelease(
            !!o.json,
            result,
            `WARNOperatorLeaseRelease: ${o.key} claim ${o.claimId} of session ${o.holderSessionId} released by operator session ${actingSessionId} (event ${result.operator_event_id})`,
          );
        },
        (r) => claimLine('released', r.claim) + `\nreason: ${r.claim.release_reason}`,
        releaseJson,
      ),
    );
}
