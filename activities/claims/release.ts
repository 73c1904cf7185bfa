import type { Transaction } from 'kysely';
import type { Database } from '../../db/database';
import { claimView, liveClaimIdOfSession, type ClaimView } from '../../db/claims';
import { ensureItem, requireProject } from '../../db/projects';
import { requireLiveSession } from '../../db/sessions';
import { claimAlreadyReleased, claimNotFound, claimNotHeld, requireReleaseReason } from '../../domain/claimRefusals';
import { refusal } from '../../domain/errors';
import { parseItemRef } from '../../domain/itemRef';
import { inLineTransaction, lockClaimForRelease, releaseServingLine, type LineDeps } from '../waitingLine';
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
    await releaseServingLine(
      trx,
      claim,
      { reason, bySessionId: session.session_id, byActorId: session.actor_id },
      deps.lifetimeMs,
      effects,
    );
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
 * C9/C12: release by claim id. The holder releases its own claim (a QA host after its run,
 * a pre-retirement DEPLOY: hold); anyone else goes through the operator rules.
 */
export async function releaseWorkClaim(deps: LineDeps, input: WorkReleaseInput): Promise<ReleaseResult> {
  const reason = requireReleaseReason(input.reason);
  const { value, effects, warnings } = await inLineTransaction(deps.db, deps.notifier, async (trx, effects) => {
    const claim = await lockClaimForRelease(trx, input.claimId);
    if (!claim) throw claimNotFound(input.claimId);
    if (claim.released_at) {
      if (isOwnEarlierRelease(claim, input.actingSessionId, reason))
        return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
      throw claimAlreadyReleased({ ...claim, released_at: claim.released_at });
    }
    if (claim.session_id === input.actingSessionId) {
      const holder = await requireLiveSession(trx, input.actingSessionId);
      await releaseServingLine(
        trx,
        claim,
        { reason, bySessionId: holder.session_id, byActorId: holder.actor_id },
        deps.lifetimeMs,
        effects,
      );
      return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
    }
    const holderProjectId = await holderProjectIdOf(trx, claim);
    if (holderProjectId === null) {
      throw refusal(
        'not_claim_holder',
        `claim ${claim.claim_id} is held by session ${claim.session_id}, not ${input.actingSessionId}`,
        {
          recovery: `act as the holder (--session ${claim.session_id})`,
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
