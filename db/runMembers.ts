import { sql } from 'kysely';
import type { RunRow } from './database';
import type { Executor } from './pool';

/** A run's members (deployment_run_items), their audited removals, and the work they carry (D1, D3, D5). */

export interface MemberRow {
  item_id: number;
  item: string;
  added_at: Date;
  delivery_intent: 'progress' | 'final';
  requirement_selection: string[] | null;
  requirement_snapshot: unknown;
  containment_attestation: unknown;
}

/** The run's members with their item labels, in item order. */
export async function membersOf(db: Executor, runId: string): Promise<MemberRow[]> {
  return db
    .selectFrom('deployment_run_items as m')
    .innerJoin('backlog_items as i', 'i.item_id', 'm.item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select([
      'm.item_id',
      'm.added_at',
      'm.delivery_intent',
      'm.requirement_selection',
      'm.requirement_snapshot',
      'm.containment_attestation',
    ])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'))
    .where('m.run_id', '=', runId)
    .orderBy('m.item_id')
    .execute();
}

/** Each member's intent and whether a commit closed it, in item order (settlement reads these). */
export async function memberStates(
  db: Executor,
  runId: string,
): Promise<{ item_id: number; delivery_intent: 'progress' | 'final'; closed_at: Date | null }[]> {
  return db
    .selectFrom('deployment_run_items')
    .select(['item_id', 'delivery_intent', 'closed_at'])
    .where('run_id', '=', runId)
    .orderBy('item_id')
    .execute();
}

/** Admits one member (D3); an explicit selection is stored verbatim, a derived one as null (D5). */
export async function insertMember(
  db: Executor,
  run: Pick<RunRow, 'run_id' | 'candidate_sha'>,
  itemId: number,
  selection: string[] | null,
): Promise<void> {
  await db
    .insertInto('deployment_run_items')
    .values({
      run_id: run.run_id,
      item_id: itemId,
      requirement_selection: selection ? JSON.stringify(selection) : null,
      delivered_source_sha: run.candidate_sha,
    })
    .execute();
}

/**
 * D1: an earlier audited removal of the item now knows where it went, but only a run created
 * after the one it left is "later": an older run admitting it says nothing.
 */
export async function noteLaterRun(
  db: Executor,
  itemId: number,
  run: Pick<RunRow, 'run_id' | 'created_at'>,
): Promise<void> {
  await db
    .updateTable('deployment_run_item_removals')
    .set({ later_run_id: run.run_id })
    .where('item_id', '=', itemId)
    .where('later_run_id', 'is', null)
    .where('run_id', '!=', run.run_id)
    .where(({ eb, selectFrom }) =>
      eb('run_id', 'in', selectFrom('deployment_runs').select('run_id').where('created_at', '<', run.created_at)),
    )
    .execute();
  // the membership record of that removal says the same (C10's `items requirements` reads it)
  await db
    .updateTable('deployment_run_memberships')
    .set({ later_run_id: run.run_id })
    .where('item_id', '=', itemId)
    .where('ended_by', '=', 'removed')
    .where('later_run_id', 'is', null)
    .where('run_id', '!=', run.run_id)
    .where(({ eb, selectFrom }) =>
      eb('run_id', 'in', selectFrom('deployment_runs').select('run_id').where('created_at', '<', run.created_at)),
    )
    .execute();
}

/**
 * The labels a run's workflow carries for its members (the YokeItem search attribute): the
 * run's status, its member items, and a version that grows with every membership change
 * (an add adds a member; a removal takes one away and adds a removal row).
 */
export async function memberLabelsOf(
  db: Executor,
  runId: string,
): Promise<{ status: string; items: string[]; version: number } | undefined> {
  const row = await db
    .selectFrom('deployment_runs as r')
    .select('r.status')
    .select(
      sql<string[]>`coalesce((SELECT array_agg(p.item_prefix || '-' || i.number ORDER BY m.item_id)
         FROM deployment_run_items m JOIN backlog_items i ON i.item_id = m.item_id
         JOIN projects p ON p.project_id = i.project_id WHERE m.run_id = r.run_id), '{}')`.as('items'),
    )
    .select(
      sql<number>`((SELECT count(*) FROM deployment_run_items m WHERE m.run_id = r.run_id)
         + 2 * (SELECT count(*) FROM deployment_run_item_removals x WHERE x.run_id = r.run_id))::int`.as('version'),
    )
    .where('r.run_id', '=', runId)
    .executeTakeFirst();
  return row;
}

export interface RemovalRow {
  item: string;
  reason: string;
  removed_at: Date;
  later_run_id: string | null;
  removed_by_session_id: string | null;
}

/** The run's audited member removals, oldest first. */
export async function removalsOf(db: Executor, runId: string): Promise<RemovalRow[]> {
  return db
    .selectFrom('deployment_run_item_removals as r')
    .innerJoin('backlog_items as i', 'i.item_id', 'r.item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select(['r.reason', 'r.removed_at', 'r.later_run_id', 'r.removed_by_session_id'])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'))
    .where('r.run_id', '=', runId)
    .orderBy('r.removal_id')
    .execute();
}

/** Whether the item is a member of the run now. */
export async function isMember(db: Executor, runId: string, itemId: number): Promise<boolean> {
  const row = await db
    .selectFrom('deployment_run_items')
    .select('item_id')
    .where('run_id', '=', runId)
    .where('item_id', '=', itemId)
    .executeTakeFirst();
  return !!row;
}
