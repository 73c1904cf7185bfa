/**
 * W6: a shared deployment-stage execution that has not held the host, joining after the
 * latest earlier execution of its run, stage and shared plan was aborted while holding it,
 * takes that execution's place: the earliest queued_at of its granted waits or claimed_at
 * of its leases on the host. Pure, so the rule is tested apart from the executions that
 * will use it.
 */
export interface PredecessorOnHost {
  /** The predecessor was aborted while holding the host. */
  abortedWhileHolding: boolean;
  /** queued_at of the predecessor's granted waits on the host (ISO instants). */
  grantedWaitQueuedAts: string[];
  /** claimed_at of the predecessor's leases on the host (ISO instants). */
  leaseClaimedAts: string[];
}

export interface Joiner {
  /** The joining execution has itself held the host at some point. */
  hasHeldHost: boolean;
}

/** The queued_at the joiner takes, or null when it queues from now like anyone else. */
export function placeToTake(joiner: Joiner, predecessor: PredecessorOnHost | undefined): string | null {
  if (joiner.hasHeldHost || !predecessor?.abortedWhileHolding) return null;
  const instants = [...predecessor.grantedWaitQueuedAts, ...predecessor.leaseClaimedAts];
  if (instants.length === 0) return null;
  return instants.reduce((earliest, t) => (Date.parse(t) < Date.parse(earliest) ? t : earliest));
}
