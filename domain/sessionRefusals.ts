import { refusal, usageError, type YokeError } from './errors';

/** sessions.session_id's length (its check constraint). */
export const MAX_SESSION_ID = 200;

/**
 * Why an id cannot name a session, or null: longer than the column holds, or holding a control
 * character (a newline, a tab), which breaks every table and board that shows it.
 */
export function sessionIdProblem(id: string): string | null {
  // characters as Postgres counts them (code points), not JavaScript's UTF-16 units
  const length = [...id].length;
  if (length > MAX_SESSION_ID) return `at most ${MAX_SESSION_ID} characters (${length} given)`;
  if (/[\u0000-\u001f\u007f]/.test(id)) return 'a session id holds no control characters (newline, tab, ...)';
  return null;
}

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

/**
 * U5: a session's usage is read from its own harness's artifact. A fold naming another harness
 * would replace the measured totals with a reading of some other source, so it is refused
 * (a session registered `other` may be folded as any harness).
 */
export function harnessMismatch(sessionId: string, registered: string, given: string): YokeError {
  return usageError(
    'harness_mismatch',
    `session "${sessionId}" is registered as a ${registered} session; --harness ${given} would replace its ${registered} usage`,
    {
      recovery: `fold its own artifact: yoke hooks usage --session ${sessionId} --harness ${registered} --artifact PATH`,
      details: { session_id: sessionId, registered_harness: registered, harness: given },
    },
  );
}
