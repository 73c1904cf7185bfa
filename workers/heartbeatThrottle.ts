/**
 * W9, issue 11: an aborted or cancelled QA execution releases its machine in that same transaction,
 * and the command its case runs over SSH learns of the end only from a heartbeat's answer. The SDK
 * sends a heartbeat at most every 0.8 x heartbeatTimeout, 24 s for ONCE_HEARTBEATING, so the
 * command ran on that long on a machine the line had already given to its next holder. SSH
 * activities heartbeat every 2 s (activities/hosts/ssh.ts); this sends each one, so a
 * cancellation reaches the command within about 2 s. Every worker (main and tests) takes it.
 */
export const HEARTBEAT_THROTTLE = { maxHeartbeatThrottleInterval: '2 seconds' } as const;
