import { sql } from 'kysely';
import type { Executor } from './pool';

/** add-item and remove-item on a run that has not settled (D1, D5): the member rows they change. */

/** Deletes the member row; false when the item was no member. */
export async function deleteMember(db: Executor, runId: string, itemId: number): Promise<boolean> {
  const row = await db
    .deleteFrom('deployment_run_items')
    .where('run_id', '=', runId)
    .where('item_id', '=', itemId)
    .returning('item_id')
    .executeTakeFirst();
  return row !== undefined;
}

/** D1: the audited removal. */
export async function recordRemoval(
  db: Executor,
  removal: { run_id: string; item_id: number; reason: string; removed_by_session_id: string },
): Promise<{ reason: string; removed_at: Date; later_run_id: string | null }> {
  return db
    .insertInto('deployment_run_item_removals')
    .values(removal)
    .returning(['reason', 'removed_at', 'later_run_id'])
    .executeTakeFirstOrThrow();
}

/** A removed member's roll-ups still pending are retracted (manually). */
export async function retractPendingRollUpsOf(db: Executor, runId: string, item: string): Promise<void> {
  await db
    .updateTable('deployment_run_qa')
    .set({ retracted_at: sql`clock_timestamp()`, retraction: 'manual', updated_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('source', '=', 'item-rollup')
    .where('check_name', 'like', `${item}/%`)
    .where('status', '=', 'pending')
    .execute();
}
