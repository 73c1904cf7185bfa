import type { Kysely } from 'kysely';
import type { CompletionRunEntry, Database } from '../db/database';
import {
  completionFlowChoices,
  completionWalks,
  dependenciesOf,
  itemByRef,
  listItems as listItemRows,
  writeLanePath,
  type ItemRow,
} from '../db/items';
import type { Executor } from '../db/pool';
import { requireProject } from '../db/projects';
import { requireLiveSession } from '../db/sessions';
import {
  dependencySatisfied,
  doneGateReasons,
  ITEM_STATUSES,
  type CompletedDelivery,
  type DeliveryEvidence,
  type ItemStatus,
} from '../domain/completion';
import { refusal, usageError } from '../domain/errors';
import { parseItemRef } from '../domain/itemRef';
import { parseLanePath } from '../domain/lanePath';
import { doneGateRefusal, readDoneGateFacts, writeItemStatus } from './completion/doneGate';
import { stampPrerequisites } from './settlement/commit';
import { settlementContext } from './settlement/members';

export interface ItemView {
  item: string;
  project: string;
  title: string | null;
  status: ItemStatus;
  status_changed_at: string | null;
  delivery_evidence: DeliveryEvidence;
  /** D7: the attribution the done write published (also inside delivery_evidence). */
  completed_deliveries: CompletedDelivery[];
  completion_flow: string | null;
  /** D8: the one completion-runs walk, newest first, and the run it reads. */
  completion_runs: CompletionRunEntry[];
  completion_run: string | null;
  dependencies: { item: string; environment: string | null; satisfied: boolean }[];
  tracker_issue: number | null;
  lane_path: string | null;
}

export const ITEM_FIELDS = ['status', 'lane'] as const;

/** Item reads and the status write a person runs (`yoke items ...`). */
export function itemActivities(deps: { db: Kysely<Database> }) {
  const { db } = deps;

  async function views(executor: Executor, rows: ItemRow[]): Promise<ItemView[]> {
    const ids = rows.map((r) => r.item_id);
    const [walks, dependencies, flows] = await Promise.all([
      completionWalks(executor, ids),
      dependenciesOf(executor, ids),
      completionFlowChoices(executor),
    ]);
    return rows.map((r) => {
      const walk = walks.get(r.item_id);
      const flow =
        flows.find((f) => f.flow_id === r.completion_flow_id) ??
        flows.find((f) => f.project_id === r.project_id && f.completion_flow);
      return {
        item: r.item,
        project: r.project,
        title: r.title,
        status: r.status,
        status_changed_at: r.status_changed_at?.toISOString() ?? null,
        delivery_evidence: r.delivery_evidence,
        completed_deliveries: r.delivery_evidence.completed_deliveries ?? [],
        completion_flow: flow?.name ?? null,
        completion_runs: walk?.completion_runs ?? [],
        completion_run: walk?.read_run_id ?? null,
        dependencies: dependencies
          .filter((d) => d.item_id === r.item_id)
          .map((d) => ({
            item: d.depends_on,
            environment: d.environment || null,
            satisfied: dependencySatisfied({ status: d.status, evidence: d.delivery_evidence }, d.environment),
          })),
        tracker_issue: r.tracker_issue,
        lane_path: r.lane_path,
      };
    });
  }

  async function getItem(input: { item: string }): Promise<ItemView> {
    const row = await itemByRef(db, parseItemRef(input.item));
    return (await views(db, [row]))[0]!;
  }

  async function listItems(input: { project?: string; status?: string }): Promise<ItemView[]> {
    if (input.status && !(ITEM_STATUSES as readonly string[]).includes(input.status)) {
      throw usageError('invalid_item_status', `unknown item status "${input.status}"`, {
        recovery: `use one of: ${ITEM_STATUSES.join(', ')}`,
        details: { status: input.status },
      });
    }
    const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
    return views(db, await listItemRows(db, { projectId, status: input.status as ItemStatus | undefined }));
  }

  /**
   * `yoke items update PREFIX-N status S` / `lane PATH`. Delivery-ready needs the item's
   * dependencies (D7); done goes through the done gate against the run its completion walk
   * reads (D8), the same write settlement uses.
   */
  async function updateItem(input: { sessionId: string; item: string; field: string; value: string }) {
    if (!(ITEM_FIELDS as readonly string[]).includes(input.field)) {
      throw usageError('unknown_item_field', `items cannot update "${input.field}"`, {
        recovery: `choose from: ${ITEM_FIELDS.join(', ')}`,
        details: { field: input.field },
      });
    }
    if (input.field === 'status' && !(ITEM_STATUSES as readonly string[]).includes(input.value)) {
      throw usageError('invalid_item_status', `unknown item status "${input.value}"`, {
        recovery: `use one of: ${ITEM_STATUSES.join(', ')}`,
        details: { status: input.value },
      });
    }
    // S3 removes the lane recursively: a path that names no single checkout is refused first.
    const lane = input.field === 'lane' ? parseLanePath(input.value) : null;
    const ref = parseItemRef(input.item);
    await db.transaction().execute(async (trx) => {
      const session = await requireLiveSession(trx, input.sessionId);
      const item = await itemByRef(trx, ref, { lock: true });
      if (lane !== null) {
        await writeLanePath(trx, item.item_id, lane);
        return;
      }
      const to = input.value as ItemStatus;
      if (item.status === 'done' && to !== 'done') {
        throw refusal('item_done', `${item.item} is done; a completed delivery is never revoked`, {
          recovery: 'open a new item for further work',
          details: { item: item.item },
        });
      }
      if (to === 'delivery_ready') {
        const unmet = (await views(trx, [item]))[0]!.dependencies.filter((d) => !d.satisfied);
        if (unmet.length) {
          throw refusal(
            'dependency_unsatisfied',
            `${item.item} depends on ${unmet.map((d) => `${d.item}${d.environment ? ` delivered to ${d.environment}` : ' done'}`).join(', ')}`,
            {
              recovery: `deliver ${unmet.map((d) => d.item).join(', ')} first (yoke items get ${unmet[0]!.item})`,
              details: { item: item.item, unsatisfied: unmet },
            },
          );
        }
      }
      if (to !== 'done') {
        await writeItemStatus(trx, { item, to, sessionId: session.session_id });
        return;
      }
      const walk = (await completionWalks(trx, [item.item_id])).get(item.item_id);
      const runId = walk?.read_run_id ?? null;
      if (!runId) {
        throw refusal('done_gate_refused', `${item.item} cannot be done: no completion run delivered it`, {
          recovery: `deliver it through its completion flow: yoke deployment-runs start-for-item ${item.item} --candidate SHA`,
          details: { item: item.item, reasons: [] },
        });
      }
      const ctx = await settlementContext(trx, runId);
      const facts = (await readDoneGateFacts(trx, ctx.run, [item])).get(item.item_id)!;
      const reasons = doneGateReasons({ ...facts, prepared: true });
      if (reasons.length) throw doneGateRefusal(item.item, reasons);
      // The same prerequisites settlement commits first: the rung and the status preflight.
      await stampPrerequisites(trx, ctx, [item.item_id]);
      await writeItemStatus(trx, {
        item,
        to: 'done',
        closing: ctx.closing,
        facts: { ...facts, prepared: true },
        sessionId: session.session_id,
      });
    });
    return getItem({ item: input.item });
  }

  return { getItem, listItems, updateItem };
}
