import {
  claimView,
  consumeReservationView,
  heartbeatClaim,
  heldUnseen,
  insertClaimRow,
  takeClaim,
  type NewClaimInput,
} from '../db/claims';
import { actsFor } from '../db/actors';
import { liveHolder } from '../db/claimUnits';
import { requireLiveSession } from '../db/sessions';
import { lockTestMachineForTake } from '../db/testMachines';
import { isUnhealthy, lockLine } from '../db/waits';
import {
  claimContended,
  heldRefusal,
  notOwnSession,
  testMachineUnhealthy,
  testMachineUnknown,
  type Wanted,
} from '../domain/claimRefusals';
import type { YokeError } from '../domain/errors';
import type { AcquireResult, JoinRequest } from './claims/acquireResult';
import {
  consumeReservation,
  expireReservations,
  grantOwnWait,
  inLineTransaction,
  joinLine,
  serveLine,
  type LineDeps,
} from './waitingLine';

/**
 * QA_HOST acquire with the waiting line (W2, W4, W5, W7). The common path is one statement:
 * it takes a free, healthy, registered (C3) machine nobody waits for, or refuses naming
 * another session's live holder when the caller does not join the line. Otherwise, under
 * the line's lock: the caller's own
 * reserved turn is consumed; a free machine goes to the oldest live waiter first; and a
 * refusal joins the line in the same transaction, so no release can slip between them.
 */
export async function takeTestMachine(
  deps: LineDeps,
  wanted: Wanted,
  asked: NewClaimInput,
  opts: { join?: JoinRequest; bypassLine?: boolean },
): Promise<AcquireResult> {
  const { db, lifetimeMs } = deps;
  // A turn taken for a QA plan execution names it: a sibling execution of the same session
  // waits for it like anyone else instead of re-entering it (W2).
  const execution = opts.join?.qaPlanExecutionId ?? null;
  const claim: NewClaimInput = { ...asked, qa_plan_execution_id: execution };
  const mine = (holder: { session_id: string; qa_plan_execution_id: number | null }, sessionId: string) =>
    holder.session_id === sessionId &&
    (execution === null || holder.qa_plan_execution_id === null || holder.qa_plan_execution_id === execution);
  const machine = String(claim.scope.test_machine);
  for (let attempt = 0; attempt < 3; attempt++) {
    const seen = await takeClaim(db, claim, { machine, lineGuard: !opts.bypassLine });
    if (!seen.machineKnown) throw testMachineUnknown(machine);
    if (seen.taken) return { claim: seen.taken, reentered: false, consumed_reservation: false, warnings: [] };
    // Another session's hold that is not a lapsed reservation: the refusal the line's
    // transaction would reach, without it (nothing to join, nothing to expire or serve).
    const othersHold = seen.holder && seen.holder.session_id !== claim.session_id && !seen.holderExpired;
    if (seen.sessionLive && othersHold && !opts.join) throw heldRefusal(wanted, seen.holder!);
    // W7: the caller's own reserved turn is consumed in one statement under the line's lock.
    if (seen.holder?.session_id === claim.session_id && seen.holder.reserved_until && !seen.holderExpired) {
      const consumed = await consumeReservationView(db, machine, claim.session_id, execution);
      if (consumed) return { claim: consumed, reentered: false, consumed_reservation: true, warnings: [] };
    }
    if (!heldUnseen(seen) || opts.join) break;
  }
  const { value, warnings } = await inLineTransaction<Omit<AcquireResult, 'warnings'>>(
    db,
    deps.notifier,
    async (trx, effects) => {
      await lockLine(trx, machine);
      // C5, C3: the session and the machine rows are locked (FOR KEY SHARE) as the one-statement
      // take locks them, after the line (a session end locks its lines before its row): an end
      // or a removal that commits first is seen here, one that comes later waits for this take.
      const session = await requireLiveSession(trx, claim.session_id, { lock: true });
      if (!(await lockTestMachineForTake(trx, machine))) throw testMachineUnknown(machine);
      await expireReservations(trx, lifetimeMs, effects, machine);
      for (let attempt = 0; attempt < 3; attempt++) {
        const holder = await liveHolder(trx, claim);
        if (holder && mine(holder, session.session_id)) {
          if (holder.reserved_until) {
            await consumeReservation(trx, holder);
            return { claim: await claimView(trx, holder.claim_id), reentered: false, consumed_reservation: true };
          }
          await heartbeatClaim(trx, holder.claim_id);
          return { claim: await claimView(trx, holder.claim_id), reentered: true, consumed_reservation: false };
        }
        let why: YokeError | undefined;
        if (holder) why = heldRefusal(wanted, await claimView(trx, holder.claim_id));
        else if (!opts.bypassLine && (await isUnhealthy(trx, machine))) why = testMachineUnhealthy(machine);
        else if (!opts.bypassLine && (await serveLine(trx, machine, lifetimeMs, effects))) continue; // now reserved: look again
        if (why) {
          if (!opts.join) return { refused: why };
          // C1: a wait is joined with your own session; named here, where the row's policy would
          // only say "violates row-level security policy"
          const acting = await actsFor(trx, session.actor_id);
          if (!acting.allowed) throw notOwnSession(acting.role, session);
          const joined = await joinLine(
            trx,
            {
              test_machine: machine,
              session_id: session.session_id,
              actor_id: session.actor_id,
              resume_command: opts.join.resumeCommand,
              rationale: `${why.code}: ${why.message}`,
              qa_plan_execution_id: opts.join.qaPlanExecutionId ?? null,
              ...(opts.join.queuedAt ? { queued_at: opts.join.queuedAt } : {}),
            },
            effects,
          );
          why.details.wait = {
            wait_id: joined.wait.wait_id,
            position: joined.position,
            queued_at: joined.wait.queued_at.toISOString(),
            joined_now: joined.joined,
            resume_command: joined.wait.resume_command,
          };
          why.message += `; ${joined.joined ? 'joined' : 'still in'} the waiting line at position ${joined.position}`;
          return { refused: why };
        }
        const inserted = await insertClaimRow(trx, claim);
        if (inserted) {
          await grantOwnWait(trx, machine, session.session_id, inserted.claim_id, execution);
          return { claim: await claimView(trx, inserted.claim_id), reentered: false, consumed_reservation: false };
        }
      }
      throw claimContended(wanted);
    },
  );
  return { ...value, warnings };
}
