import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { insertFoldRequest } from '../../db/sessionUsage';
import { sessionById } from '../../db/sessions';
import type { FoldedHarness } from '../../domain/harnesses';
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
