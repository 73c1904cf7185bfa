import { Kysely, sql } from 'kysely';

/**
 * U13 for fold requests: session_usage_fold_requests kept 0016_row_security's read-all policy, so
 * raw SQL by any connected role read every session's queued transcript paths. Now a role reads the
 * requests of the sessions it may see, the rule 0047_usage_read_visibility gave session_usage: its
 * own sessions, sessions outside any project, and sessions in projects it holds any grant on.
 * Admins and the worker (which reads the requests back to fold them, and settles them) read all
 * through the table's yoke_service policy, which covers SELECT.
 *
 * `hooks usage --async` still records its request: the insert's RETURNING reads back a request
 * for the caller's own session, which the rule admits.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER POLICY yoke_read ON session_usage_fold_requests USING (
      EXISTS (SELECT 1 FROM sessions s
               WHERE s.session_id = session_usage_fold_requests.session_id
                 AND (s.project_id IS NULL OR s.actor_id = session_user
                      OR s.project_id IN (SELECT g.project_id FROM project_grants g WHERE g.actor_id = session_user))))
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER POLICY yoke_read ON session_usage_fold_requests USING (true)`.execute(db);
}
