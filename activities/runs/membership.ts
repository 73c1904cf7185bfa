import { sql } from 'kysely';
import type { FlowRow, RunRow } from '../../db/database';
import type { Executor } from '../../db/pool';
import { obligationsOf } from '../../db/runs';
import {
  answeringStage,
  derivedSelection,
  requirementId,
  untargetedObligations,
  type UntargetedObligation,
} from '../../domain/admission';
import { refusal } from '../../domain/errors';

/** An explicit selection, used verbatim (D5). */
export interface ExplicitSelection {
  requirementIds: string[];
  planIds: string[];
}

export interface MemberHandle {
  item_id: number;
  item: string;
}

export function hasExplicit(sel: ExplicitSelection): boolean {
  return sel.requirementIds.length > 0 || sel.planIds.length > 0;
}

/**
 * The explicit ids that concern one member: `PREFIX-N/case` for it, a bare `case` it has,
 * and every plan id. Unknown requirement ids are refused rather than silently dropped.
 */
async function explicitFor(db: Executor, member: MemberHandle, sel: ExplicitSelection): Promise<string[]> {
  const cases = new Set((await obligationsOf(db, [member.item_id])).map((o) => o.case_key));
  const mine = sel.requirementIds.filter((id) => (id.includes('/') ? id.split('/')[0] === member.item : cases.has(id)));
  for (const id of mine) {
    const caseKey = id.includes('/') ? id.split('/')[1]! : id;
    if (!cases.has(caseKey)) {
      throw refusal(
        'unknown_requirement',
        `item ${member.item} has no QA case ${caseKey} (from --requirement-id ${id})`,
        {
          recovery: `declare it under the item's obligations and apply, or drop --requirement-id ${id}`,
          details: { item: member.item, requirement_id: id },
        },
      );
    }
  }
  return [...mine, ...sel.planIds.map((p) => `plan:${p}`)];
}

/** The member's requirement list: its stored selection, else the derived one (D5). */
export async function selectionOf(
  db: Executor,
  flow: FlowRow,
  member: MemberHandle,
  stored: string[] | null,
): Promise<string[]> {
  if (stored) return stored;
  return derivedSelection(await obligationsOf(db, [member.item_id]), flow.stages);
}

/**
 * Run-level QA rows for a member's selection (Q3 item roll-ups): each selected obligation is
 * a row at the QA stage that answers it.
 */
async function rollUp(
  db: Executor,
  run: RunRow,
  flow: FlowRow,
  member: MemberHandle,
  selection: string[],
): Promise<void> {
  const obligations = await obligationsOf(db, [member.item_id]);
  for (const id of selection) {
    const caseKey = id.startsWith('plan:') ? null : id.includes('/') ? id.split('/')[1]! : id;
    const obligation = obligations.find((o) => o.case_key === caseKey);
    const stage = answeringStage(obligation ?? { target_env: null }, flow.stages);
    if (!stage) continue; // nothing on this run answers it; D6 already named it
    await db
      .insertInto('deployment_run_qa')
      .values({
        run_id: run.run_id,
        check_name: id.includes('/') ? id : requirementId(member.item, id),
        source: 'item-rollup',
        blocking: obligation?.blocking ?? true,
        stage_name: stage.name,
      })
      .onConflict((oc) =>
        oc
          .columns(['run_id', 'check_name'])
          .doUpdateSet({ retracted_at: null, retraction: null, updated_at: sql`clock_timestamp()` }),
      )
      .execute();
  }
}

/** Q3: the flow's default checks, materialized when the run is created. */
export async function materializeFlowDefaults(db: Executor, run: RunRow, flow: FlowRow): Promise<void> {
  for (const stage of flow.stages.filter((s) => s.kind === 'qa')) {
    for (const check of stage.checks) {
      await db
        .insertInto('deployment_run_qa')
        .values({
          run_id: run.run_id,
          check_name: check.name,
          source: 'flow-default',
          blocking: check.blocking,
          stage_name: stage.name,
        })
        .onConflict((oc) => oc.doNothing())
        .execute();
    }
  }
}

/**
 * Admits one member (D3, D5): an explicit selection is stored verbatim; a derived one is
 * validated but not stored (the freeze derives it again). Returns the D6 warnings.
 */
export async function admitMember(
  db: Executor,
  run: RunRow,
  flow: FlowRow,
  member: MemberHandle,
  sel: ExplicitSelection,
): Promise<UntargetedObligation[]> {
  const explicit = hasExplicit(sel) ? await explicitFor(db, member, sel) : null;
  await db
    .insertInto('deployment_run_items')
    .values({
      run_id: run.run_id,
      item_id: member.item_id,
      requirement_selection: explicit ? JSON.stringify(explicit) : null,
    })
    .execute();
  // An earlier audited removal of this item now knows where it went (D1).
  await db
    .updateTable('deployment_run_item_removals')
    .set({ later_run_id: run.run_id })
    .where('item_id', '=', member.item_id)
    .where('later_run_id', 'is', null)
    .where('run_id', '!=', run.run_id)
    .execute();
  await rollUp(db, run, flow, member, await selectionOf(db, flow, member, explicit));
  return untargetedObligations(await obligationsOf(db, [member.item_id]), flow.stages);
}

/** D5 freeze: every derived selection is resolved now and written back concrete. */
export async function freezeComposition(db: Executor, run: RunRow, flow: FlowRow): Promise<CarriedWork> {
  const items: CarriedWork['items'] = [];
  for (const m of await membersOf(db, run.run_id)) {
    const selection = await selectionOf(db, flow, m, m.requirement_selection);
    if (!m.requirement_selection) {
      await db
        .updateTable('deployment_run_items')
        .set({ requirement_selection: JSON.stringify(selection) })
        .where('run_id', '=', run.run_id)
        .where('item_id', '=', m.item_id)
        .execute();
      await rollUp(db, run, flow, m, selection);
    }
    items.push({ item: m.item, requirement_ids: selection, derived: !m.requirement_selection });
  }
  await db
    .updateTable('deployment_runs')
    .set({ carried_work: JSON.stringify(items), frozen_at: sql`clock_timestamp()` })
    .where('run_id', '=', run.run_id)
    .execute();
  return { recorded: true, items };
}

export interface MemberRow {
  item_id: number;
  item: string;
  added_at: Date;
  delivery_intent: 'progress' | 'final';
  requirement_selection: string[] | null;
  requirement_snapshot: unknown;
  containment_attestation: unknown;
}

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

export interface CarriedWork {
  /** true once recorded at the freeze; false while derived live (D1). */
  recorded: boolean;
  items: { item: string; requirement_ids: string[]; derived: boolean }[];
}

/** D1: carried work as recorded at the freeze, or derived live (and unrecorded) before it. */
export async function carriedWork(db: Executor, run: RunRow, flow: FlowRow): Promise<CarriedWork> {
  if (run.carried_work) return { recorded: true, items: run.carried_work as CarriedWork['items'] };
  const items = [];
  for (const m of await membersOf(db, run.run_id)) {
    items.push({
      item: m.item,
      requirement_ids: await selectionOf(db, flow, m, m.requirement_selection),
      derived: m.requirement_selection === null,
    });
  }
  return { recorded: false, items };
}
