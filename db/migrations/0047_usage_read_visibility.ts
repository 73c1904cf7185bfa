import { Kysely, sql } from 'kysely';

/**
 * U13 in the database: a session's measured usage is read only by whom may see the session. The
 * CLI's views already hid it (db/visibility.ts, connectedVisibleSql), but session_usage kept
 * 0016_row_security's read-all policy, so raw SQL by any connected role read every session's
 * tokens. Now a role reads the usage of its own sessions, of sessions outside any project, and
 * of sessions in projects it holds any grant on (`project.read` is the grant for read alone):
 * the rule of visibleSessionSql with the connected role as the viewer. Admins and the worker
 * read all through the table's yoke_service policy, which covers SELECT.
 *
 * A fold of your own session still writes: its upsert reads back only its own row.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER POLICY yoke_read ON session_usage USING (
      EXISTS (SELECT 1 FROM sessions s
               WHERE s.session_id = session_usage.session_id
                 AND (s.project_id IS NULL OR s.actor_id = session_user
                      OR s.project_id IN (SELECT g.project_id FROM project_grants g WHERE g.actor_id = session_user))))
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER POLICY yoke_read ON session_usage USING (true)`.execute(db);
}
