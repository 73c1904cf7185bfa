import type { Transaction } from 'kysely';
import type { ClaimRow, Database } from '../../db/database';
import { claimView, claimViews, liveClaimIdOfSession, releasedBy, type ClaimView } from '../../db/claims';
import { recordEvent } from '../../db/events';
import { hasPermission, projectById, requireProject } from '../../db/projects';
import { requireLiveSession, sessionById } from '../../db/sessions';
import type { Permission } from '../../domain/permissions';
import { isSticky } from '../../domain/claimKinds';
import {
  claimAlreadyReleased,
  claimNotFound,
  deployLockRetired,
  requireReleaseReason,
} from '../../domain/claimRefusals';
import { refusal, usageError } from '../../domain/errors';
import { parseOperatorKey } from '../../domain/operatorKeys';
import {
  inLineTransaction,
  lockClaimForRelease,
  releaseServingLine,
  type LineDeps,
  type LineEffects,
} from '../waitingLine';
import type { Reservation } from '../waitingLine';

const CLAIMS_RELEASE: Permission = 'claims.release';
export const OPERATOR_RELEASE_EVENT = 'WARNOperatorLeaseRelease';

export interface OperatorReleaseInput {
  actingSessionId: string;
  key: string;
  claimId: number;
  holderSessionId: string;
  reason: string;
  project?: string;
  hookContext?: boolean;
}

export interface ReleaseResult {
  claim: ClaimView;
  /** The WARNOperatorLeaseRelease event written before the release, when an operator released it. */
  operator_event_id: string | null;
  /** W7: the waiting-line turn this release reserved, if any. */
  reservations: Reservation[];
  warnings: string[];
}

/**
 * C8/C11: the operator release. The acting session holds a live steering seat on the
 * holder's project and its actor has that project's claims.release; the
 * WARNOperatorLeaseRelease event is written before the release, and the operator's reason
 * stays on the claim row for good.
 */
async function authorizeOperator(
  trx: Transaction<Database>,
  actingSessionId: string,
  holderProjectId: number,
  hookContext: boolean,
  what: string,
) {
  if (hookContext) {
    throw refusal('hook_context_refused', `an operator release of ${what} cannot run from a hook context`, {
      recovery: 'run the release yourself from a terminal, outside any agent hook (unset YOKE_HOOK_CONTEXT)',
      details: { target: what },
    });
  }
  const operator = await requireLiveSession(trx, actingSessionId);
  const project = await projectById(trx, holderProjectId);
  const seat = await liveClaimIdOfSession(trx, operator.session_id, { kind: 'steering', projectId: holderProjectId });
  // Both rules are read before refusing, so the recovery names every missing one: a caller
  // told only to take the seat took it (or found it held) and was then refused for the grant.
  const granted = await hasPermission(trx, holderProjectId, operator.actor_id, CLAIMS_RELEASE);
  const grantIt = `an admin grants it: yoke projects grant ${project.name} --actor ${operator.actor_id} --permission ${CLAIMS_RELEASE}`;
  const takeSeat = `yoke claims steering take --project ${project.name} --session ${operator.session_id}`;
  if (seat === undefined) {
    // Another session's seat makes "take the seat" a claim_held dead end: name who has it.
    const [held] = await claimViews(trx, { projectId: holderProjectId, kinds: ['steering'], activeOnly: true });
    const seatStep = held
      ? `the seat is held by session ${held.session_id} (actor ${held.actor_id}): ask it to release this hold, or to free the seat (claim ${held.claim_id}) so you can take it: ${takeSeat}`
      : `take the seat first: ${takeSeat}`;
    throw refusal(
      'steering_seat_required',
      `session ${operator.session_id} holds no live steering seat on ${project.name}, the holder's project` +
        (granted ? '' : `, and actor ${operator.actor_id} lacks ${CLAIMS_RELEASE} on it`),
      {
        recovery: granted
          ? seatStep
          : `an operator release needs both: ${grantIt}; then ${seatStep}. Or ask the holder's actor to release it`,
        details: { session_id: operator.session_id, project: project.name, has_permission: granted },
      },
    );
  }
  if (!granted) {
    throw refusal('permission_denied', `actor ${operator.actor_id} lacks ${CLAIMS_RELEASE} on ${project.name}`, {
      recovery: `${grantIt}; or ask the holder's actor to release it`,
      details: { actor_id: operator.actor_id, project: project.name, permission: CLAIMS_RELEASE },
    });
  }
  return operator;
}

/** Authorizes the acting session as an operator, writes the audit event, then releases. */
export async function releaseAsOperator(
  deps: LineDeps,
  trx: Transaction<Database>,
  effects: LineEffects,
  op: {
    claim: ClaimRow;
    actingSessionId: string;
    holderProjectId: number;
    hookContext: boolean;
    what: string;
    reason: string;
  },
): Promise<{ claim: ClaimView; operator_event_id: string }> {
  const { claim, holderProjectId, reason } = op;
  const operator = await authorizeOperator(trx, op.actingSessionId, holderProjectId, op.hookContext, op.what);
  // C11: the event first, then the release (a raw-SQL release gets its event from the claim
  // trigger instead: migrations 0027_authority_holes, 0030_operator_event_once).
  const eventId = await recordEvent(trx, {
    event_type: OPERATOR_RELEASE_EVENT,
    project_id: holderProjectId,
    session_id: operator.session_id,
    claim_id: claim.claim_id,
    payload: {
      key: claim.key,
      target_kind: claim.target_kind,
      sticky: isSticky(claim.target_kind),
      holder_session_id: claim.session_id,
      operator_session_id: operator.session_id,
      operator_actor_id: operator.actor_id,
      reason,
    },
  });
  await releaseServingLine(trx, claim, releasedBy(operator, reason), deps.lifetimeMs, effects);
  return { claim: await claimView(trx, claim.claim_id), operator_event_id: eventId };
}

/** A retried release finds its own earlier effect and answers the same (DESIGN.md principle 3). */
export function isOwnEarlierRelease(claim: ClaimRow, actingSessionId: string, reason: string): boolean {
  return (
    claim.released_at !== null && claim.released_by_session_id === actingSessionId && claim.release_reason === reason
  );
}

/** The project whose steering seat may release a claim: the claim's, else its holder session's. */
export async function holderProjectIdOf(trx: Transaction<Database>, claim: ClaimRow): Promise<number | null> {
  return claim.project_id ?? (await sessionById(trx, claim.session_id))?.project_id ?? null;
}

/** C8: an operator releases a claim by key, naming the claim id and its holder as reviewed. */
export async function operatorRelease(deps: LineDeps, input: OperatorReleaseInput): Promise<ReleaseResult> {
  const key = parseOperatorKey(input.key);
  const reason = requireReleaseReason(input.reason);
  if (key.kind === 'deploy_serialization') throw deployLockRetired(key.key);
  // C8: QA_HOST keys are machine-scoped and ignore any project; every other key names its project.
  if (key.kind !== 'qa_admission' && !input.project) {
    throw usageError('project_required', `releasing ${key.key} needs --project P`, {
      recovery: `yoke coordination-claim release --project P --key ${key.key} --claim-id ${input.claimId} --holder-session-id ${input.holderSessionId} --reason R`,
      details: { key: key.key },
    });
  }
  const { value, effects, warnings } = await inLineTransaction(deps.db, deps.notifier, async (trx, effects) => {
    const claim = await lockClaimForRelease(trx, input.claimId);
    if (!claim) throw claimNotFound(input.claimId);
    if (claim.key !== key.key) {
      throw refusal(
        'claim_key_mismatch',
        `claim ${claim.claim_id} is ${claim.key ?? claim.target_kind}, not ${key.key}`,
        {
          recovery: `check the claim id with: yoke coordination-claim list --key ${key.key} --active-only`,
          details: { claim_id: claim.claim_id, key: claim.key, requested_key: key.key },
        },
      );
    }
    if (claim.session_id !== input.holderSessionId) {
      throw refusal(
        'holder_session_mismatch',
        `claim ${claim.claim_id} is held by session ${claim.session_id}, not ${input.holderSessionId}`,
        {
          recovery: 'review the row again and pass its holder with --holder-session-id',
          details: { claim_id: claim.claim_id, holder_session_id: claim.session_id, given: input.holderSessionId },
        },
      );
    }
    if (claim.released_at) {
      if (isOwnEarlierRelease(claim, input.actingSessionId, reason))
        return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
      throw claimAlreadyReleased({ ...claim, released_at: claim.released_at });
    }
    if (key.kind !== 'qa_admission') {
      const project = await requireProject(trx, input.project!);
      if (claim.project_id !== project.project_id) {
        const owner = claim.project_id === null ? null : (await projectById(trx, claim.project_id)).name;
        throw refusal(
          'claim_project_mismatch',
          `claim ${claim.claim_id} belongs to ${owner ? `project ${owner}` : 'no project'}, not ${project.name}`,
          {
            recovery: owner
              ? `name the holder's project: --project ${owner}`
              : `name the holder's project with --project (see yoke coordination-claim list --key ${key.key})`,
            details: { claim_id: claim.claim_id, project: project.name, claim_project: owner },
          },
        );
      }
    }
    const holderProjectId = await holderProjectIdOf(trx, claim);
    if (holderProjectId === null) {
      throw refusal(
        'holder_project_unknown',
        `claim ${claim.claim_id} and its session ${claim.session_id} name no project, so no steering seat can release it`,
        {
          recovery: `the holder releases it: yoke claims work release --claim-id ${claim.claim_id} --reason R`,
          details: { claim_id: claim.claim_id },
        },
      );
    }
    return releaseAsOperator(deps, trx, effects, {
      claim,
      actingSessionId: input.actingSessionId,
      holderProjectId,
      hookContext: input.hookContext ?? false,
      what: key.key,
      reason,
    });
  });
  return { ...value, reservations: effects.reservations, warnings };
}
