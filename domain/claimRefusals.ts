import { refusal, usageError, type YokeError } from './errors';
import type { TargetKind } from './claimKinds';

export interface Holder {
  claim_id: number;
  session_id: string;
  actor_id: string;
  claimed_at: string;
  heartbeat_at: string;
  project: string | null;
  item: string | null;
  /** Set when the hold is a waiting-line turn reserved for the holder and not yet consumed (W7). */
  reserved_until?: string | null;
}

/** What an acquirer asked for, as the operator would name it. */
export interface Wanted {
  kind: TargetKind;
  /** Operator key, steering seat or item reference. */
  label: string;
  key: string | null;
  project: string | null;
}

function releaseRecovery(wanted: Wanted, holder: Holder): string {
  const byHolder = `the holder releases it with: yoke claims work release --claim-id ${holder.claim_id} --reason R`;
  switch (wanted.kind) {
    case 'qa_admission':
      return `wait for the holder; ${byHolder}; a stranded hold is recovered from a session with a steering seat on the holder's project: yoke coordination-claim release --key ${wanted.key} --claim-id ${holder.claim_id} --holder-session-id ${holder.session_id} --reason R`;
    case 'migration_serialization':
    case 'route_qualification':
      return `wait for the holder; ${byHolder}; a stranded hold is recovered from a session with a steering seat on ${holder.project ?? 'the project'}: yoke coordination-claim release --project ${holder.project ?? 'P'} --key ${wanted.key} --claim-id ${holder.claim_id} --holder-session-id ${holder.session_id} --reason R`;
    default:
      return `choose other work, or ask session ${holder.session_id} to release it (${byHolder})`;
  }
}

/** A refused acquire names the holder (claim id, session, since when) and the way out. */
export function heldRefusal(wanted: Wanted, holder: Holder): YokeError {
  const owner = holder.item ? ` for item ${holder.item}` : '';
  const message = holder.reserved_until
    ? `${wanted.label} is reserved by claim ${holder.claim_id} for session ${holder.session_id} (actor ${holder.actor_id}), the oldest in its waiting line, until ${holder.reserved_until}`
    : `${wanted.label} is held by claim ${holder.claim_id} (session ${holder.session_id}, actor ${holder.actor_id}${owner}) since ${holder.claimed_at}`;
  return refusal('claim_held', message, {
    recovery: releaseRecovery(wanted, holder),
    details: { target_kind: wanted.kind, key: wanted.key, holder },
  });
}

export function deployLockRetired(key: string): YokeError {
  return refusal(
    'deploy_lock_retired',
    `${key} names the retired per-project deploy lock; deployment runs take no coordination claim`,
    {
      recovery:
        'runs serialize by the target origins they occupy (yoke deployment-runs execute RUN); a hold taken before the retirement is released by its claim id: yoke claims work release --claim-id N --reason R',
      details: { key },
    },
  );
}

/** Three lost races in a row: the unit is changing hands faster than we can look. */
export function claimContended(wanted: Wanted): YokeError {
  return refusal('claim_contended', `${wanted.label} changed hands three times while being taken`, {
    recovery: 'run the same command again',
    details: { key: wanted.key },
  });
}

/** C3: a QA host hold names a registered machine; an unknown name is refused, never granted. */
export function testMachineUnknown(machine: string): YokeError {
  return refusal('test_machine_unknown', `no test machine is named ${machine} (machine names are case-insensitive)`, {
    recovery: `add it first: yoke test-machine add ${machine} --host H --port P --user U --credential NAME (see yoke test-machine list)`,
    details: { test_machine: machine },
  });
}

/** C1 issue 13: claims (and their waits) are taken with your own session; the words Postgres' own refusal uses. */
export function notOwnSession(role: string, session: { session_id: string; actor_id: string }): YokeError {
  return refusal(
    'permission_denied',
    `${role} cannot take a claim for session ${session.session_id} of actor ${session.actor_id}: claims are taken with your own session`,
    {
      recovery: 'register your own session (yoke sessions register --session S) and pass it',
      details: { session_id: session.session_id, actor_id: session.actor_id },
    },
  );
}

export function testMachineUnhealthy(machine: string): YokeError {
  return refusal(
    'test_machine_unhealthy',
    `test machine ${machine} is unhealthy: its newest check is a failed verification`,
    {
      recovery: `wait in line for a successful verification, or verify it: yoke test-machine verify ${machine}`,
      details: { test_machine: machine },
    },
  );
}

export function claimNotFound(claimId: number): YokeError {
  return refusal('claim_not_found', `no claim has id ${claimId}`, {
    recovery: 'find the claim id with: yoke coordination-claim list --active-only',
    details: { claim_id: claimId },
  });
}

export function claimAlreadyReleased(claim: {
  claim_id: number;
  released_at: Date;
  release_reason: string | null;
}): YokeError {
  return refusal(
    'claim_already_released',
    `claim ${claim.claim_id} was released at ${claim.released_at.toISOString()} (${claim.release_reason})`,
    {
      recovery: 'nothing to do; list live holds with: yoke coordination-claim list --active-only',
      details: {
        claim_id: claim.claim_id,
        released_at: claim.released_at.toISOString(),
        release_reason: claim.release_reason,
      },
    },
  );
}

export function claimNotHeld(sessionId: string, what: string): YokeError {
  return refusal('claim_not_held', `session ${sessionId} holds no live claim on ${what}`, {
    recovery: `list your claims with: yoke claims list --holder-session-id ${sessionId} --active-only`,
    details: { session_id: sessionId, target: what },
  });
}

/** Every release says why; the reason stays on the claim row. */
export function requireReleaseReason(reason: string): string {
  const trimmed = reason.trim();
  if (!trimmed) {
    throw usageError('reason_required', 'a release needs a non-empty --reason', {
      recovery: 'say why, for example --reason "suite finished"; the reason is kept on the claim row',
    });
  }
  return trimmed;
}
