import type { Kysely } from 'kysely';
import { actorKnown, requireAdmin } from '../db/actors';
import type { Database, ProjectRow } from '../db/database';
import {
  insertGrant,
  insertProject,
  lockProjectDeclaration,
  listProjectRows,
  projectByName,
  projectByPrefix,
  requireProject,
} from '../db/projects';
import { refusal, usageError } from '../domain/errors';
import { defaultItemPrefix } from '../domain/itemRef';
import { isPermission, PERMISSIONS } from '../domain/permissions';

export interface ProjectView {
  project_id: number;
  name: string;
  item_prefix: string;
  created_at: string;
}

function view(p: ProjectRow): ProjectView {
  return { project_id: p.project_id, name: p.name, item_prefix: p.item_prefix, created_at: p.created_at.toISOString() };
}

export function projectActivities(deps: { db: Kysely<Database> }) {
  const { db } = deps;

  /** Idempotent: creating an existing project with the same prefix returns it (`created: false`). */
  async function createProject(input: {
    name: string;
    itemPrefix?: string;
  }): Promise<{ project: ProjectView; created: boolean }> {
    const prefix = (input.itemPrefix ?? defaultItemPrefix(input.name)).toUpperCase();
    if (!/^[A-Z][A-Z0-9]{0,15}$/.test(prefix)) {
      throw usageError(
        'invalid_item_prefix',
        `item prefix "${prefix}" must be a letter followed by up to 15 letters or digits`,
        {
          recovery: 'pass --prefix, for example --prefix YOKE',
          details: { prefix },
        },
      );
    }
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(input.name)) {
      throw usageError('invalid_project_name', `project name "${input.name}" must be 1-64 letters, digits, . _ or -`, {
        recovery: 'choose a name like web-shop',
        details: { project: input.name },
      });
    }
    // said as every admin-only command says it, not as the table's bare permission error
    await requireAdmin(db, `create project ${input.name}`);
    return db.transaction().execute(async (trx) => {
      // the lock an apply declaring the same project takes: the two never race to insert it
      await lockProjectDeclaration(trx, { name: input.name, itemPrefix: prefix });
      const inserted = await insertProject(trx, { name: input.name, itemPrefix: prefix });
      if (inserted) return { project: view(inserted), created: true };
      const existing = await projectByName(trx, input.name);
      if (existing && existing.item_prefix === prefix) return { project: view(existing), created: false };
      if (existing) {
        throw refusal(
          'project_exists',
          `project ${input.name} exists with item prefix ${existing.item_prefix}, not ${prefix}`,
          {
            recovery: `use the existing project, or choose another name`,
            details: { project: input.name, item_prefix: existing.item_prefix },
          },
        );
      }
      const owner = await projectByPrefix(trx, prefix);
      // Issue 9: a new project reusing an item_prefix is bad input (exit 2) naming the field, as in `apply`
      throw usageError(
        'item_prefix_taken',
        `--prefix: item_prefix ${prefix} already belongs to project ${owner?.name}`,
        {
          recovery: `choose another prefix: yoke projects create ${input.name} --prefix OTHER`,
          details: { field: 'item_prefix', option: '--prefix', prefix, item_prefix: prefix, project: owner?.name },
        },
      );
    });
  }

  async function grantPermission(input: { project: string; actor: string; permission: string }) {
    if (!isPermission(input.permission)) {
      throw usageError('invalid_permission', `unknown permission "${input.permission}"`, {
        recovery: `use one of: ${PERMISSIONS.join(', ')}`,
        details: { permission: input.permission },
      });
    }
    await requireAdmin(db, `grant ${input.permission} on project ${input.project}`);
    const project = await requireProject(db, input.project);
    await insertGrant(db, { projectId: project.project_id, actorId: input.actor, permission: input.permission });
    // A grant may come before its actor's first login or session, so it is kept; but a name
    // nothing knows is most often a typo, which would otherwise leave the real actor refused.
    const warnings = (await actorKnown(db, input.actor))
      ? []
      : [
          {
            code: 'actor_unknown' as const,
            message: `no login role or session is named ${input.actor}: the grant is kept and applies once that actor connects or registers a session; if the name is misspelt, grant the right one (yoke actors list shows the login roles)`,
          },
        ];
    return {
      project: project.name,
      project_id: project.project_id,
      actor_id: input.actor,
      permission: input.permission,
      warnings,
    };
  }

  async function listProjects(): Promise<ProjectView[]> {
    return (await listProjectRows(db)).map(view);
  }

  return { createProject, grantPermission, listProjects };
}
