import { refusal } from '../domain/errors';
import { formatItemRef, type ItemRef } from '../domain/itemRef';
import type { Permission } from '../domain/permissions';
import type { Kysely } from 'kysely';
import type { Database, ProjectRow } from './database';
import type { Executor } from './pool';
import { requireLiveSession } from './sessions';
import { advisoryXactLock } from './advisoryLock';

export async function projectByName(db: Executor, name: string): Promise<ProjectRow | undefined> {
  return db.selectFrom('projects').selectAll().where('name', '=', name).executeTakeFirst();
}

export async function projectByPrefix(db: Executor, prefix: string): Promise<ProjectRow | undefined> {
  return db.selectFrom('projects').selectAll().where('item_prefix', '=', prefix).executeTakeFirst();
}

/** Inserts a project unless its name or prefix is taken; `undefined` when it was. */
export async function insertProject(
  db: Executor,
  project: { name: string; itemPrefix: string },
): Promise<ProjectRow | undefined> {
  return db
    .insertInto('projects')
    .values({ name: project.name, item_prefix: project.itemPrefix })
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
}

/**
 * Serializes the declarations (`yoke apply`) of one project: a transaction-scoped lock on its
 * name and on its item prefix (both unique), taken in one order, before the apply reads
 * anything. A concurrent apply of the same file then reads the project the first one created
 * (unchanged, or updated) instead of failing on the unique name.
 */
export async function lockProjectDeclaration(
  trx: Executor,
  project: { name: string; itemPrefix: string },
): Promise<void> {
  for (const unit of [`project-name:${project.name}`, `project-prefix:${project.itemPrefix}`].sort())
    await advisoryXactLock(trx, unit);
}

/** A project as its definition declares it; `tracker` is JSON text. */
export async function insertDeclaredProject(
  db: Executor,
  project: { name: string; itemPrefix: string; tracker: string | null; repository: string | null },
): Promise<ProjectRow> {
  return db
    .insertInto('projects')
    .values({
      name: project.name,
      item_prefix: project.itemPrefix,
      tracker: project.tracker,
      repository: project.repository,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** S3: `tracker` is JSON text, null for the no-op tracker. */
export async function setProjectTracker(db: Executor, projectId: number, tracker: string | null): Promise<void> {
  await db.updateTable('projects').set({ tracker }).where('project_id', '=', projectId).execute();
}

/** T3: the checkout takeover reads containment in. */
export async function setProjectRepository(db: Executor, projectId: number, repository: string | null): Promise<void> {
  await db.updateTable('projects').set({ repository }).where('project_id', '=', projectId).execute();
}

export async function listProjectRows(db: Executor): Promise<ProjectRow[]> {
  return db.selectFrom('projects').selectAll().orderBy('project_id').execute();
}

/** Idempotent: a grant that exists already stays as it is. */
export async function insertGrant(
  db: Executor,
  grant: { projectId: number; actorId: string; permission: Permission },
): Promise<void> {
  await db
    .insertInto('project_grants')
    .values({ project_id: grant.projectId, actor_id: grant.actorId, permission: grant.permission })
    .onConflict((oc) => oc.doNothing())
    .execute();
}

export async function projectById(db: Executor, projectId: number): Promise<ProjectRow> {
  return db.selectFrom('projects').selectAll().where('project_id', '=', projectId).executeTakeFirstOrThrow();
}

export async function requireProject(db: Executor, name: string): Promise<ProjectRow> {
  const project = await projectByName(db, name);
  if (!project) {
    throw refusal('project_not_found', `project "${name}" does not exist`, {
      recovery: `create it with: yoke projects create ${name}`,
      details: { project: name },
    });
  }
  return project;
}

export async function hasPermission(
  db: Executor,
  projectId: number,
  actorId: string,
  permission: Permission,
): Promise<boolean> {
  const row = await db
    .selectFrom('project_grants')
    .select('actor_id')
    .where('project_id', '=', projectId)
    .where('actor_id', '=', actorId)
    .where('permission', '=', permission)
    .executeTakeFirst();
  return row !== undefined;
}

export interface ItemHandle {
  item_id: number;
  project_id: number;
  item: string;
}

/**
 * Backlog items are named PREFIX-N; the prefix names the project. An item is recorded the
 * first time a claim names it, so teams need not mirror their backlog before claiming.
 */
export async function ensureItem(db: Executor, ref: ItemRef): Promise<ItemHandle> {
  const project = await projectByPrefix(db, ref.prefix);
  if (!project) {
    throw refusal(
      'item_prefix_unknown',
      `no project uses the item prefix "${ref.prefix}" (item ${formatItemRef(ref)})`,
      {
        recovery: `create the project with that prefix: yoke projects create NAME --prefix ${ref.prefix}`,
        details: { item: formatItemRef(ref) },
      },
    );
  }
  await db
    .insertInto('backlog_items')
    .values({ project_id: project.project_id, number: ref.number })
    .onConflict((oc) => oc.columns(['project_id', 'number']).doNothing())
    .execute();
  const row = await db
    .selectFrom('backlog_items')
    .select(['item_id', 'project_id'])
    .where('project_id', '=', project.project_id)
    .where('number', '=', ref.number)
    .executeTakeFirstOrThrow();
  return { ...row, item: formatItemRef(ref) };
}

/**
 * An item that already exists; a reference to one that does not is refused `item_unknown`
 * (a typo such as WEB-999 must not create and enrol an item).
 */
export async function existingItem(db: Executor, ref: ItemRef): Promise<ItemHandle> {
  const row = await db
    .selectFrom('backlog_items as i')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select(['i.item_id', 'i.project_id'])
    .where('p.item_prefix', '=', ref.prefix)
    .where('i.number', '=', ref.number)
    .executeTakeFirst();
  if (!row) {
    const item = formatItemRef(ref);
    throw refusal('item_unknown', `no backlog item ${item} exists`, {
      recovery: `items come to exist by declaring them in the project definition (yoke apply -f project.yaml) or by taking them (yoke claims item take ${item}); check the id for a typo`,
      details: { item },
    });
  }
  return { ...row, item: formatItemRef(ref) };
}

/**
 * ensureItem for a claim take: the item is recorded only when the acting session is live, in one
 * transaction, so a take refused for its session (ended, never registered) leaves no bare item in
 * `items list` and the frontier.
 */
export function ensureItemForTake(db: Kysely<Database>, sessionId: string, ref: ItemRef): Promise<ItemHandle> {
  return db.transaction().execute(async (trx) => {
    await requireLiveSession(trx, sessionId);
    return ensureItem(trx, ref);
  });
}
