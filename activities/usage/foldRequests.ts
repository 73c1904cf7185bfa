import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { foldOwnership, insertFoldRequest } from '../../db/sessionUsage';
import { sessionById } from '../../db/sessions';
import type { FoldedHarness } from '../../domain/harnesses';
import { refusal } from '../../domain/errors';
import { sessionNotRegistered } from '../../domain/sessionRefusals';

/**
 * `hooks usage --async` (issues 5 and 13, U10): records the fold request under the caller's
 * own role. The database holds it to the caller's own sessions (permission_denied otherwise,
 * migration 0028), so the request exists before any workflow is nudged, or not at all.
 */
export async function recordFoldRequest(
  db: Kysely<Database>,
  request: { session_id: string; harness: FoldedHarness; artifacts: string[] },
): Promise<string> {
  if (!(await sessionById(db, request.session_id))) throw sessionNotRegistered(request.session_id, request.harness);
  return insertFoldRequest(db, request);
}

/**
 * Issue 13: a fold in the foreground writes under the caller's role, which Postgres holds to
 * the caller's own sessions; read first, so another actor's session is refused by name, as the
 * `--async` request is (migration 0028), not with the bare row-security message after reading
 * the whole artifact. Admins and the worker fold any session.
 */
export async function requireFoldableSession(db: Kysely<Database>, sessionId: string): Promise<void> {
  const { owner, me, service } = await foldOwnership(db, sessionId);
  if (owner === null || service || owner === me) return;
  throw refusal('permission_denied', `session ${sessionId} belongs to actor ${owner}; ${me} cannot fold its usage`, {
    recovery: 'fold your own sessions (yoke sessions list), or ask an admin',
    details: { session_id: sessionId, actor_id: owner },
  });
}
