import type { Transaction } from 'kysely';
import type { Database } from '../../db/database';
import { claimView, liveClaimIdOfSession, releaseServingLineView, releasedBy, type ClaimView } from '../../db/claims';
import { ensureItem, requireProject } from '../../db/projects';
import { requireLiveSession, sessionById } from '../../db/sessions';
import type { SessionRow } from '../../db/database';
import { claimAlreadyReleased, claimNotFound, claimNotHeld, requireReleaseReason } from '../../domain/claimRefusals';
import { refusal } from '../../domain/errors';
import { parseItemRef } from '../../domain/itemRef';
import {
  inLineTransaction,
  lockClaimForRelease,
  noEffects,
  notifyLine,
  releaseServingLine,
  reservationOf,
  type LineDeps,
} from '../waitingLine';
import { holderProjectIdOf, isOwnEarlierRelease, releaseAsOperator, type ReleaseResult } from './operatorRelease';

export interface WorkReleaseInput {
  actingSessionId: string;
  claimId: number;
  reason: string;
  hookContext?: boolean;
}

/** Releases the acting session's own live claim found by `find`; refuses when there is none. */
async function releaseOwn(
  deps: LineDeps,
  sessionId: string,
  what: string,
  reason: string,
  find: (trx: Transaction<Database>) => Promise<number | undefined>,
): Promise<ClaimView> {
  const { value } = await inLineTransaction(deps.db, deps.notifier, async (trx, effects) => {
    const session = await requireLiveSession(trx, sessionId);
    const claimId = await find(trx);
    const claim = claimId === undefined ? undefined : await lockClaimForRelease(trx, claimId);
    if (!claim || claim.released_at) throw claimNotHeld(sessionId, what);
    await releaseServingLine(trx, claim, releasedBy(session, reason), deps.lifetimeMs, effects);
    return claimView(trx, claim.claim_id);
  });
  return value;
}

export async function releaseSteeringSeat(
  deps: LineDeps,
  input: { sessionId: string; project: string; reason?: string },
): Promise<ClaimView> {
  const what = `the steering seat of ${input.project}`;
  return releaseOwn(deps, input.sessionId, what, input.reason ?? 'steering seat released', async (trx) => {
    const project = await requireProject(trx, input.project);
    return liveClaimIdOfSession(trx, input.sessionId, { kind: 'steering', projectId: project.project_id });
  });
}

export async function releaseItem(
  deps: LineDeps,
  input: { sessionId: string; item: string; reason?: string },
): Promise<ClaimView> {
  const ref = parseItemRef(input.item);
  return releaseOwn(deps, input.sessionId, `item ${input.item}`, input.reason ?? 'item released', async (trx) => {
    const item = await ensureItem(trx, ref);
    return liveClaimIdOfSession(trx, input.sessionId, { kind: 'item', itemId: item.item_id });
  });
}

/**
 * C9: the holder releases its own claim, and so does the holder's actor from any live session
 * of that actor: a sticky QA host outlives the session that took it (the suite runs on), so
 * the ended session cannot act, but its actor can. Returns the acting live session, or
 * undefined when the acting session belongs to another actor (the operator rules decide).
 */
async function holderActorRelease(
  trx: Transaction<Database>,
  claim: { claim_id: number; session_id: string },
  actingSessionId: string,
  reason: string,
): Promise<SessionRow | undefined> {
  const holder = await sessionById(trx, claim.session_id);
  if (claim.session_id === actingSessionId && holder && (holder.ended_at || holder.terminated_at)) {
    throw refusal(
      'session_ended',
      `session "${actingSessionId}" that holds claim ${claim.claim_id} has ended; its actor ${holder.actor_id} releases the claim from any live session`,
      {
        recovery: `yoke claims work release --claim-id ${claim.claim_id} --reason ${JSON.stringify(reason)} --session <a live session of ${holder.actor_id}>`,
        details: { session_id: actingSessionId, claim_id: claim.claim_id, actor_id: holder.actor_id },
      },
    );
  }
  const acting = await requireLiveSession(trx, actingSessionId);
  if (claim.session_id === actingSessionId || holder?.actor_id === acting.actor_id) return acting;
  return undefined;
}

/**
 * C9/C12: release by claim id. The holder releases its own claim (a QA host after its run,
 * a pre-retirement DEPLOY: hold); anyone else goes through the operator rules. The common
 * case, a holder's release, is one statement, which also reserves a test machine for its oldest
 * live waiter (W7); the rest (a reserved turn released or waits of ended sessions (W9),
 * refusals, retries and operators) is one transaction.
 */
export async function releaseWorkClaim(deps: LineDeps, input: WorkReleaseInput): Promise<ReleaseResult> {
  const reason = requireReleaseReason(input.reason);
  const fast = await releaseServingLineView(deps.db, input.claimId, input.actingSessionId, reason, deps.lifetimeMs);
  if (fast) {
    const effects = noEffects();
    if (fast.reserved) effects.reservations.push(reservationOf(fast.reserved));
    const warnings = await notifyLine(deps.notifier, effects);
    return { claim: fast.released, operator_event_id: null, reservations: effects.reservations, warnings };
  }
  const { value, effects, warnings } = await inLineTransaction(deps.db, deps.notifier, async (trx, effects) => {
    const claim = await lockClaimForRelease(trx, input.claimId);
    if (!claim) throw claimNotFound(input.claimId);
    if (claim.released_at) {
      if (isOwnEarlierRelease(claim, input.actingSessionId, reason))
        return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
      throw claimAlreadyReleased({ ...claim, released_at: claim.released_at });
    }
    const actor = await holderActorRelease(trx, claim, input.actingSessionId, input.reason);
    if (actor) {
      await releaseServingLine(trx, claim, releasedBy(actor, reason), deps.lifetimeMs, effects);
      return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
    }
    const holderProjectId = await holderProjectIdOf(trx, claim);
    if (holderProjectId === null) {
      // the holder's own session may have ended: any live session of its actor releases it
      const holder = await sessionById(trx, claim.session_id);
      const live = holder && !holder.ended_at && !holder.terminated_at;
      throw refusal(
        'not_claim_holder',
        `claim ${claim.claim_id} is held by session ${claim.session_id}, not ${input.actingSessionId}`,
        {
          recovery: live
            ? `act as the holder (--session ${claim.session_id}), or from another live session of actor ${holder.actor_id}`
            : `session ${claim.session_id} has ended: release it from a live session of actor ${holder?.actor_id ?? '(unknown)'}: yoke claims work release --claim-id ${claim.claim_id} --reason R --session S`,
          details: { claim_id: claim.claim_id, holder_session_id: claim.session_id },
        },
      );
    }
    return releaseAsOperator(deps, trx, effects, {
      claim,
      actingSessionId: input.actingSessionId,
      holderProjectId,
      hookContext: input.hookContext ?? false,
      what: claim.key ?? `claim ${claim.claim_id}`,
      reason,
    });
  });
  return { ...value, reservations: effects.reservations, warnings };
}
