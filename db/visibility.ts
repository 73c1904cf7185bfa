import { sql, type RawBuilder } from 'kysely';

/**
 * U13 visibility: an actor reads the projects it holds any grant on (`project.read` is the
 * grant for read alone), its own sessions, and sessions outside any project. The actor is a
 * value, or an SQL expression (a report reads its viewer's actor in the same statement).
 */
export function visibleSessionSql(alias: string, actorId: string | RawBuilder<string>): RawBuilder<boolean> {
  const s = sql.ref(alias);
  return sql<boolean>`(${s}.project_id IS NULL OR ${s}.actor_id = ${actorId}
    OR ${s}.project_id IN (SELECT g.project_id FROM project_grants g WHERE g.actor_id = ${actorId}))`;
}

/**
 * U13 with no viewing session: the connected role is the viewer (issue 13: who you are is the
 * Postgres login). Admins and the worker (the control plane, and `npm start`'s superuser) see
 * every session; any other actor sees what its own grants let it read, so leaving `--session`
 * out never widens what an actor reads.
 */
export function connectedVisibleSql(alias: string): RawBuilder<boolean> {
  return sql<boolean>`(yoke_is_service() OR ${visibleSessionSql(alias, sql<string>`session_user::text`)})`;
}
