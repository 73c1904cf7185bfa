import { sql, type Selectable } from 'kysely';
import { refusal } from '../domain/errors';
import type { CompletedDelivery, DeliveryEvidence, ItemStatus } from '../domain/completion';
import { formatItemRef, type ItemRef } from '../domain/itemRef';
import type { BacklogItemsTable, CompletionRunEntry } from './database';
import type { Executor } from './pool';

/** Backlog items as completion sees them: status, delivery_evidence, completion flow, walk (D7, D8). */

export interface ItemRow {
  item_id: number;
  project_id: number;
  project: string;
  item: string;
  title: string | null;
  status: ItemStatus;
  status_changed_at: Date | null;
  delivery_evidence: DeliveryEvidence;
  completion_flow_id: number | null;
  tracker_issue: number | null;
  lane_path: string | null;
}

function itemColumns(db: Executor) {
  return db
    .selectFrom('backlog_items as i')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select([
      'i.item_id',
      'i.project_id',
      'p.name as project',
      'i.title',
      'i.status',
      'i.status_changed_at',
      'i.delivery_evidence',
      'i.completion_flow_id',
      'i.tracker_issue',
      'i.lane_path',
    ])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'));
}

export async function itemByRef(db: Executor, ref: ItemRef, opts: { lock?: boolean } = {}): Promise<ItemRow> {
  let q = itemColumns(db).where('p.item_prefix', '=', ref.prefix).where('i.number', '=', ref.number);
  if (opts.lock) q = q.forUpdate(['i']);
  const row = await q.executeTakeFirst();
  if (!row) {
    // the code a take or a run's create gives the same typo (issue 10 names it)
    throw refusal('item_unknown', `no backlog item ${formatItemRef(ref)} exists`, {
      recovery: 'declare it in the project definition and apply, or name an existing item (yoke items list)',
      details: { item: formatItemRef(ref) },
    });
  }
  return row;
}

export async function itemsById(db: Executor, itemIds: number[]): Promise<ItemRow[]> {
  if (itemIds.length === 0) return [];
  return itemColumns(db).where('i.item_id', 'in', itemIds).orderBy('i.item_id').execute();
}

/** The backlog row of a project's item by its number, if one is recorded. */
export async function backlogItemByNumber(
  db: Executor,
  projectId: number,
  number: number,
): Promise<Selectable<BacklogItemsTable> | undefined> {
  return db
    .selectFrom('backlog_items')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('number', '=', number)
    .executeTakeFirst();
}

/** Records an item as its project definition declares it, created or updated; returns its id. */
export async function upsertDeclaredItem(
  db: Executor,
  projectId: number,
  number: number,
  declared: { title: string | null; completion_flow_id: number | null; tracker_issue: number | null },
): Promise<{ item_id: number }> {
  return db
    .insertInto('backlog_items')
    .values({ project_id: projectId, number, defined_in_project: true, ...declared })
    .onConflict((oc) => oc.columns(['project_id', 'number']).doUpdateSet({ defined_in_project: true, ...declared }))
    .returning('item_id')
    .executeTakeFirstOrThrow();
}

export async function listItems(db: Executor, filter: { projectId?: number; status?: ItemStatus }): Promise<ItemRow[]> {
  let q = itemColumns(db).orderBy('p.name').orderBy('i.number');
  if (filter.projectId !== undefined) q = q.where('i.project_id', '=', filter.projectId);
  if (filter.status) q = q.where('i.status', '=', filter.status);
  return q.execute();
}

/** D8: the one completion-runs walk, for many items in one statement. */
export async function completionWalks(
  db: Executor,
  itemIds: number[],
): Promise<Map<number, { completion_runs: CompletionRunEntry[]; read_run_id: string }>> {
  if (itemIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('deployment_item_completion_runs')
    .selectAll()
    .where('item_id', 'in', itemIds)
    .execute();
  return new Map(rows.map((r) => [r.item_id, { completion_runs: r.completion_runs, read_run_id: r.read_run_id }]));
}

/** The project's default completion flow (D8), or undefined for a merge-only project. */
export async function defaultCompletionFlow(
  db: Executor,
  projectId: number,
): Promise<{ flow_id: number; name: string } | undefined> {
  return db
    .selectFrom('flows')
    .select(['flow_id', 'name'])
    .where('project_id', '=', projectId)
    .where('completion_flow', '=', true)
    .executeTakeFirst();
}

export async function defaultCompletionFlowId(db: Executor, projectId: number): Promise<number | undefined> {
  return (await defaultCompletionFlow(db, projectId))?.flow_id;
}

export interface DependencyRow {
  item_id: number;
  depends_on_item_id: number;
  depends_on: string;
  environment: string;
  status: ItemStatus;
  delivery_evidence: DeliveryEvidence;
}

export async function dependenciesOf(db: Executor, itemIds: number[]): Promise<DependencyRow[]> {
  if (itemIds.length === 0) return [];
  return db
    .selectFrom('item_dependencies as d')
    .innerJoin('backlog_items as i', 'i.item_id', 'd.depends_on_item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select(['d.item_id', 'd.depends_on_item_id', 'd.environment', 'i.status', 'i.delivery_evidence'])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('depends_on'))
    .where('d.item_id', 'in', itemIds)
    .orderBy('d.item_id')
    .orderBy('i.number')
    .execute();
}

/** A run's blocking, unretracted item roll-up rows, per member item ref (the done gate's QA). */
export async function memberQaRows(
  db: Executor,
  runId: string,
): Promise<Map<string, { check_name: string; status: string }[]>> {
  const rows = await db
    .selectFrom('deployment_run_qa')
    .select(['check_name', 'status'])
    .where('run_id', '=', runId)
    .where('source', '=', 'item-rollup')
    .where('blocking', '=', true)
    .where('retracted_at', 'is', null)
    .orderBy('check_name')
    .execute();
  const byItem = new Map<string, { check_name: string; status: string }[]>();
  for (const r of rows) {
    const item = r.check_name.split('/')[0]!;
    byItem.set(item, [...(byItem.get(item) ?? []), r]);
  }
  return byItem;
}

/**
 * Blocking post-deploy obligations of the items that no credited proof answers (S6): not
 * waived or superseded, and no passed or waived roll-up row for it on the closing run, or on a
 * run whose membership delivered the closing run's candidate (D10 supplemental credit).
 * Plan-bound obligations are answered by plan executions, not by roll-up rows.
 */
export async function unansweredObligations(
  db: Executor,
  closing: { run_id: string; candidate_sha: string },
  itemIds: number[],
): Promise<{ item_id: number; requirement_id: string; target_env: string | null }[]> {
  if (itemIds.length === 0) return [];
  const { rows } = await sql<{ item_id: number; requirement_id: string; target_env: string | null }>`
    SELECT c.item_id, p.item_prefix || '-' || i.number || '/' || c.case_key AS requirement_id, c.target_env
      FROM item_qa_cases c
      JOIN backlog_items i ON i.item_id = c.item_id
      JOIN projects p ON p.project_id = i.project_id
     WHERE c.item_id = ANY(${itemIds})
       AND c.qa_phase = 'post_deploy' AND c.blocking AND NOT c.waived AND NOT c.superseded AND c.plan_id IS NULL
       -- a requirement this run carries is the done gate's open QA, not an unanswered obligation
       AND NOT EXISTS (
         SELECT 1 FROM deployment_run_qa own
          WHERE own.run_id = ${closing.run_id} AND own.retracted_at IS NULL
            AND own.check_name = p.item_prefix || '-' || i.number || '/' || c.case_key)
       AND NOT EXISTS (
         SELECT 1
           FROM deployment_run_qa q
           JOIN deployment_run_items m ON m.run_id = q.run_id AND m.item_id = c.item_id
          WHERE q.check_name = p.item_prefix || '-' || i.number || '/' || c.case_key
            AND q.status IN ('passed', 'waived') AND q.retracted_at IS NULL
            AND (q.run_id = ${closing.run_id} OR m.delivered_source_sha = ${closing.candidate_sha}))
     ORDER BY c.item_id, c.case_key`.execute(db);
  return rows;
}

/**
 * Both stamps (rung and preflight) of many items in one statement: each key is set only when
 * it names another run, so a replay keeps the first stamp.
 */
export async function stampEvidenceOfItems(
  db: Executor,
  stamps: { item_id: number; run: string; rung: object; preflight: object }[],
): Promise<void> {
  if (stamps.length === 0) return;
  await sql`
    UPDATE backlog_items i
       SET delivery_evidence = i.delivery_evidence
             || CASE WHEN (i.delivery_evidence -> 'rung' ->> 'run') IS DISTINCT FROM v.run
                     THEN jsonb_build_object('rung', v.rung) ELSE '{}'::jsonb END
             || CASE WHEN (i.delivery_evidence -> 'preflight' ->> 'run') IS DISTINCT FROM v.run
                     THEN jsonb_build_object('preflight', v.preflight) ELSE '{}'::jsonb END
      FROM jsonb_to_recordset(${JSON.stringify(stamps)}::jsonb) AS v(item_id integer, run text, rung jsonb, preflight jsonb)
     WHERE i.item_id = v.item_id
       AND ((i.delivery_evidence -> 'rung' ->> 'run') IS DISTINCT FROM v.run
            OR (i.delivery_evidence -> 'preflight' ->> 'run') IS DISTINCT FROM v.run)`.execute(db);
}

/**
 * D7: the done write, for a set of items in one statement. Sets done and appends the
 * attribution; an item already done only gains the attribution (supplemental delivery), never
 * a second done, and an item that already carries this run's attribution for the environment
 * is left as it is (no member closed twice). Returns, per item written, whether this call
 * moved it to done.
 */
export async function writeDoneMany(
  db: Executor,
  writes: { item_id: number; delivery: CompletedDelivery }[],
): Promise<Map<number, boolean>> {
  if (writes.length === 0) return new Map();
  const { rows } = await sql<{ item_id: number; was: ItemStatus }>`
    UPDATE backlog_items i
       SET status = 'done',
           status_changed_at = CASE WHEN i.status = 'done' THEN i.status_changed_at ELSE clock_timestamp() END,
           delivery_evidence = jsonb_set(i.delivery_evidence, '{completed_deliveries}',
             coalesce(i.delivery_evidence -> 'completed_deliveries', '[]'::jsonb) || jsonb_build_array(prior.delivery))
      FROM (SELECT b.item_id, b.status AS was, v.delivery
              FROM jsonb_to_recordset(${JSON.stringify(writes)}::jsonb) AS v(item_id integer, delivery jsonb)
              JOIN backlog_items b ON b.item_id = v.item_id) prior
     WHERE i.item_id = prior.item_id
       AND NOT coalesce(i.delivery_evidence -> 'completed_deliveries', '[]'::jsonb)
             @> jsonb_build_array(jsonb_build_object('run', prior.delivery -> 'run', 'environment', prior.delivery -> 'environment'))
    RETURNING i.item_id, prior.was`.execute(db);
  return new Map(rows.map((r) => [r.item_id, r.was !== 'done']));
}

export async function writeStatus(db: Executor, itemId: number, status: ItemStatus): Promise<void> {
  await db
    .updateTable('backlog_items')
    .set({ status, status_changed_at: sql`clock_timestamp()` })
    .where('item_id', '=', itemId)
    .where('status', '!=', status)
    .execute();
}

/** D8: every flow with what an item's view needs to name its completion flow. */
export async function completionFlowChoices(
  db: Executor,
): Promise<{ flow_id: number; name: string; project_id: number; completion_flow: boolean }[]> {
  return db.selectFrom('flows').select(['flow_id', 'name', 'project_id', 'completion_flow']).execute();
}

/** The lane path an item's work is filed under (`yoke items update ITEM lane PATH`). */
export async function writeLanePath(db: Executor, itemId: number, lanePath: string): Promise<void> {
  await db.updateTable('backlog_items').set({ lane_path: lanePath }).where('item_id', '=', itemId).execute();
}

/** Marks a run's memberships of these items closed (their settlement committed them done). */
export async function markMembersClosed(db: Executor, runId: string, itemIds: number[]): Promise<void> {
  if (itemIds.length === 0) return;
  await db
    .updateTable('deployment_run_items')
    .set({ closed_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('item_id', 'in', itemIds)
    .where('closed_at', 'is', null)
    .execute();
}

/**
 * Closed members' claims end with them, in one statement: each item's own claim, its epic tasks,
 * its path claims and its item-owned migration holds (0037_audc_delivered_claims admits the same
 * kinds under a user's role).
 */
export async function releaseClaimsOfItems(
  db: Executor,
  itemIds: number[],
  reason: string,
): Promise<{ claim_id: number; session_id: string; item_id: number }[]> {
  if (itemIds.length === 0) return [];
  const rows = await db
    .updateTable('work_claims')
    .set({ released_at: sql`clock_timestamp()`, release_reason: reason })
    .where('item_id', 'in', itemIds)
    .where('released_at', 'is', null)
    .where('target_kind', 'in', ['item', 'epic_task', 'path_claim', 'migration_serialization'])
    .returning(['claim_id', 'session_id', 'item_id'])
    .execute();
  return rows.map((r) => ({ claim_id: r.claim_id, session_id: r.session_id, item_id: r.item_id! }));
}

/** Locks the items in id order and reads their status and evidence (a commit re-reads its members so). */
export async function lockItemStates(
  db: Executor,
  itemIds: number[],
): Promise<{ item_id: number; status: ItemStatus; delivery_evidence: DeliveryEvidence }[]> {
  if (itemIds.length === 0) return [];
  return db
    .selectFrom('backlog_items')
    .select(['item_id', 'status', 'delivery_evidence'])
    .where('item_id', 'in', itemIds)
    .orderBy('item_id')
    .forUpdate()
    .execute();
}
