import { refusal, type YokeError } from './errors';

/**
 * The one builder of `session_not_registered`: every path that looks a session up refuses an
 * unknown id with the same message and the same recovery (register it, then act from it).
 */
export function sessionNotRegistered(sessionId: string, harness?: string): YokeError {
  const harnessFlag = harness ? ` --harness ${harness}` : '';
  return refusal('session_not_registered', `session "${sessionId}" is not registered`, {
    recovery: `register it first: yoke sessions register --session ${sessionId} --actor YOU${harnessFlag}`,
    details: { session_id: sessionId },
  });
}

/** A session that ended (or was terminated) acts no more; a new session id acts instead. */
export function sessionEnded(sessionId: string, endedAt: Date, endReason: string | null): YokeError {
  return refusal(
    'session_ended',
    `session "${sessionId}" ended at ${endedAt.toISOString()} (${endReason ?? 'ended'})`,
    {
      recovery: 'register a new session id and act from it',
      details: { session_id: sessionId, ended_at: endedAt.toISOString(), end_reason: endReason },
    },
  );
}
