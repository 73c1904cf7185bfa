import { sql } from 'kysely';
import type { Executor } from './pool';

/** Issue 13: an actor is a Postgres login role in one of yoke's group roles. */
export type ActorKind = 'user' | 'admin' | 'agent' | 'worker';

export interface ActorRow {
  actor: string;
  kind: ActorKind;
  can_login: boolean;
}

/** Creates the login role (as the function's owner, after checking the caller is an admin). */
export async function addActorRole(db: Executor, actor: string, secret: string, kind: ActorKind): Promise<void> {
  await sql`SELECT yoke_add_actor(${actor}, ${secret}, ${kind})`.execute(db);
}

/** Drops an actor's role; false when there was none. */
export async function removeActorRole(db: Executor, actor: string): Promise<boolean> {
  const { rows } = await sql<{ removed: boolean }>`SELECT yoke_remove_actor(${actor}) AS removed`.execute(db);
  return rows[0]!.removed;
}

/** Every login role in a yoke group, with its kind (admin before worker before agent before user). */
export async function listActorRoles(db: Executor): Promise<ActorRow[]> {
  const { rows } = await sql<ActorRow>`
    SELECT r.rolname AS actor,
           CASE WHEN pg_has_role(r.oid, 'yoke_admin', 'MEMBER') THEN 'admin'
                WHEN pg_has_role(r.oid, 'yoke_worker', 'MEMBER') THEN 'worker'
                WHEN pg_has_role(r.oid, 'yoke_agent', 'MEMBER') THEN 'agent'
                ELSE 'user' END AS kind,
           r.rolcanlogin AS can_login
      FROM pg_roles r
     WHERE NOT r.rolsuper
       AND r.rolname NOT IN ('yoke_user', 'yoke_admin', 'yoke_agent', 'yoke_worker')
       AND (pg_has_role(r.oid, 'yoke_user', 'MEMBER') OR pg_has_role(r.oid, 'yoke_worker', 'MEMBER'))
     ORDER BY r.rolname`.execute(db);
  return rows;
}

/**
 * Refuses permission_denied unless an admin connects; for operations whose every write is
 * admin-only but which may write nothing (an unchanged `apply`), so the answer never depends
 * on whether anything changed.
 */
export async function requireAdmin(db: Executor, doing: string): Promise<void> {
  await sql`SELECT yoke_require_admin(${doing})`.execute(db);
}

/** Who this connection is: the recorded actor of everything it writes. */
export async function connectedActor(db: Executor): Promise<{ actor: string; admin: boolean }> {
  const { rows } = await sql<{
    actor: string;
    admin: boolean;
  }>`SELECT session_user AS actor, yoke_is_admin() AS admin`.execute(db);
  return rows[0]!;
}

/** C1 issue 13: whether this connection acts with `actorId`'s sessions: its own, or a service's (admin, worker). */
export async function actsFor(db: Executor, actorId: string): Promise<{ allowed: boolean; role: string }> {
  const { rows } = await sql<{
    allowed: boolean;
    role: string;
  }>`SELECT yoke_is_service() OR session_user = ${actorId} AS allowed, session_user AS role`.execute(db);
  return rows[0]!;
}

/**
 * Migrating is an admin's job: a connection with no yoke schema yet, or an admin's, migrates;
 * the worker's own role (yoke_worker) does not, and leaves it to `yoke db migrate`.
 */
export async function connectionMayMigrate(db: Executor): Promise<boolean> {
  const { rows } = await sql<{
    present: boolean;
  }>`SELECT to_regprocedure('yoke_is_admin()') IS NOT NULL AS present`.execute(db);
  if (!rows[0]!.present) return true;
  return (await connectedActor(db)).admin;
}

/**
 * Whether anything names `actorId` yet: a login role, or a session registered for it (an actor
 * of a single-user setup is only the name its sessions carry).
 */
export async function actorKnown(db: Executor, actorId: string): Promise<boolean> {
  const { rows } = await sql<{ known: boolean }>`
    SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = ${actorId})
        OR EXISTS (SELECT 1 FROM sessions WHERE actor_id = ${actorId}) AS known`.execute(db);
  return rows[0]!.known;
}
