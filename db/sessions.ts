import { refusal } from '../domain/errors';
import type { SessionRow } from './database';
import type { Executor } from './pool';

/** The acting session must be registered and still live to take or release anything. */
export async function requireLiveSession(db: Executor, sessionId: string): Promise<SessionRow> {
  const session = await db.selectFrom('sessions').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
  if (!session) {
    throw refusal('session_not_registered', `session "${sessionId}" is not registered`, {
      recovery: `register it first: yoke sessions register --session ${sessionId} --actor YOU`,
      details: { session_id: sessionId },
    });
  }
  const endedAt = session.ended_at ?? session.terminated_at;
  if (endedAt) {
    throw refusal(
      'session_ended',
      `session "${sessionId}" ended at ${endedAt.toISOString()} (${session.end_reason ?? 'ended'})`,
      {
        recovery: 'register a new session id and act from it',
        details: { session_id: sessionId, ended_at: endedAt.toISOString(), end_reason: session.end_reason },
      },
    );
  }
  return session;
}

export async function sessionById(db: Executor, sessionId: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
}
