import { refusal, type YokeError } from './errors';
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
