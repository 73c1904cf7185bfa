import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import {
  addActorRole,
  connectedActor,
  listActorRoles,
  removeActorRole,
  requireAdmin,
  type ActorKind,
  type ActorRow,
} from '../db/actors';
import type { Database } from '../db/database';
import { refusal, usageError, YokeError } from '../domain/errors';
import { refusalFromPostgres } from '../domain/sqlRefusal';

/** Role names yoke creates: lowercase, so the actor id and the connection's user read the same. */
const ACTOR_NAME = /^[a-z_][a-z0-9_.-]{0,62}$/;

/**
 * Names Postgres reserves for roles (pg_*, public, none) or reads as the connection's own role in
 * the policies that judge every actor (current_user, session_user, ...).
 */
function reservedActorName(name: string): boolean {
  return (
    name.startsWith('pg_') || ['public', 'none', 'current_user', 'session_user', 'current_role', 'user'].includes(name)
  );
}

export interface AddedActor {
  actor: string;
  kind: ActorKind;
  /** The connection string the actor uses: DATABASE_URL with its role and password. */
  connection_string: string;
}

/** The configured URL with another user and password; the database and host stay. */
export function connectionStringFor(databaseUrl: string, actor: string, secret: string): string {
  const url = new URL(databaseUrl);
  url.username = encodeURIComponent(actor);
  url.password = encodeURIComponent(secret);
  return url.toString();
}

export function actorActivities(deps: { db: Kysely<Database>; databaseUrl: string }) {
  const { db } = deps;

  async function addActor(input: { actor: string; kind: ActorKind }): Promise<AddedActor> {
    if (!ACTOR_NAME.test(input.actor)) {
      throw usageError(
        'invalid_actor_name',
        `actor name "${input.actor}" must be 1-63 lowercase letters, digits, _ . or -, starting with a letter or _`,
        { recovery: 'choose a name like alice or agent-7', details: { actor: input.actor } },
      );
    }
    if (reservedActorName(input.actor)) {
      throw usageError('invalid_actor_name', `actor name "${input.actor}" is reserved by Postgres`, {
        recovery:
          'choose a name like alice or agent-7 (not pg_*, public, none, current_user, session_user, current_role or user)',
        details: { actor: input.actor },
      });
    }
    await requireAdmin(db, `add actor ${input.actor}`);
    // The password is shown once, inside the connection string; Postgres keeps only its hash.
    const secret = randomBytes(18).toString('base64url');
    try {
      await addActorRole(db, input.actor, secret, input.kind);
    } catch (err) {
      throw await refinedExists(err, input.actor);
    }
    return {
      actor: input.actor,
      kind: input.kind,
      connection_string: connectionStringFor(deps.databaseUrl, input.actor, secret),
    };
  }

  /**
   * Removing an actor that does not exist is refused like every other unknown name (a typo must
   * not read as done); the refusal keeps the success answer's fields in its details.
   */
  async function removeActor(input: { actor: string }): Promise<{ actor: string; removed: true }> {
    await requireAdmin(db, `remove actor ${input.actor}`);
    const me = await connectedActor(db);
    // Postgres cannot drop the role a connection is logged in as
    if (me.admin && me.actor === input.actor) {
      throw refusal(
        'actor_in_use',
        `${input.actor} is the actor this connection is logged in as; nothing was removed`,
        {
          recovery: `connect as another admin (its DATABASE_URL) and run: yoke actors remove ${input.actor}`,
          details: { actor: input.actor, removed: false },
        },
      );
    }
    if (!(await removeActorRole(db, input.actor))) {
      throw refusal('actor_not_found', `no actor is named ${input.actor}; nothing was removed`, {
        recovery: 'check the name against yoke actors list',
        details: { actor: input.actor, removed: false },
      });
    }
    return { actor: input.actor, removed: true };
  }

  /**
   * actor_exists says to remove the existing actor first; for a role yoke did not add (a group
   * role, a superuser, another application's login) that removal is refused, so the recovery
   * says to choose another name.
   */
  async function refinedExists(err: unknown, actor: string): Promise<unknown> {
    const code = err instanceof YokeError ? err.code : refusalFromPostgres(err)?.code;
    if (code !== 'actor_exists') return err;
    if ((await listActorRoles(db)).some((a) => a.actor === actor)) return err;
    return refusal('actor_exists', `a Postgres role named ${actor} exists already, and it is not a yoke actor`, {
      recovery: 'choose another name (yoke never removes a role it did not add)',
      details: { actor },
    });
  }

  async function listActors(): Promise<ActorRow[]> {
    return listActorRoles(db);
  }

  /** The connected actor and its kind as `actors list` names it (a superuser, which no list names, is an admin). */
  async function whoAmI(): Promise<{ actor: string; admin: boolean; kind: ActorKind }> {
    const [me, roles] = await Promise.all([connectedActor(db), listActorRoles(db)]);
    const kind = roles.find((a) => a.actor === me.actor)?.kind ?? (me.admin ? 'admin' : 'user');
    return { ...me, kind };
  }

  return { addActor, removeActor, listActors, whoAmI };
}
