import type { CarriedWorkItem, FlowRow, RunRow } from '../../db/database';
import type { Executor } from '../../db/pool';
import { insertFlowDefault, upsertRollUp } from '../../db/runQa';
import { insertMember, membersOf, noteLaterRun } from '../../db/runMembers';
import { obligationsOf, type ObligationRow } from '../../db/runs';
import {
  answeringStage,
  derivedSelection,
  requirementId,
  untargetedObligations,
  type UntargetedObligation,
} from '../../domain/admission';
import { refusal } from '../../domain/errors';

// The member reads moved to db/runMembers.ts; execution reads them here still.
export { membersOf, type MemberRow } from '../../db/runMembers';

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
 * D5: an explicit selection split over the members it names. A `PREFIX-N/case` id belongs to
 * that item; a bare `case` to every member declaring that case; a plan id to every member with
 * an obligation in that plan. Ids are stored verbatim on the member they belong to; a member
 * the selection does not mention gets null and derives its own obligations. An id that matches
 * no member is refused, never dropped.
 */
async function explicitSelections(
  db: Executor,
  members: MemberHandle[],
  sel: ExplicitSelection,
): Promise<Map<number, string[] | null>> {
  const out = new Map<number, string[] | null>(members.map((m) => [m.item_id, null]));
  if (!hasExplicit(sel)) return out;
  const obligations = await obligationsOf(
    db,
    members.map((m) => m.item_id),
  );
  const add = (itemId: number, id: string) => {
    const list = out.get(itemId) ?? [];
    if (!list.includes(id)) list.push(id);
    out.set(itemId, list);
  };
  for (const id of sel.requirementIds) {
    const slash = id.indexOf('/');
    const itemRef = slash >= 0 ? id.slice(0, slash).toUpperCase() : null;
    const caseKey = slash >= 0 ? id.slice(slash + 1) : id;
    const owners = members.filter(
      (m) =>
        (itemRef === null || m.item === itemRef) &&
        obligations.some((o) => o.item_id === m.item_id && o.case_key === caseKey),
    );
    if (owners.length === 0) {
      // an id naming an item that is no member of the run: that is what is wrong, not its case
      const notMember = itemRef !== null && !members.some((m) => m.item === itemRef);
      const named = notMember
        ? `item ${itemRef} is not a member of the run (members: ${members.map((m) => m.item).join(', ') || 'none'})`
        : itemRef
          ? `item ${itemRef} has no QA case ${caseKey}`
          : `no member (${members.map((m) => m.item).join(', ') || 'none'}) has a QA case ${caseKey}`;
      throw refusal('unknown_requirement', `${named} (from --requirement-id ${id})`, {
        recovery: notMember
          ? `add the item with --item ${itemRef}, or drop --requirement-id ${id}`
          : `declare it under the item's obligations and apply, or drop --requirement-id ${id}`,
        details: { requirement_id: id, item: itemRef, members: members.map((m) => m.item) },
      });
    }
    for (const m of owners) add(m.item_id, id);
  }
  for (const plan of sel.planIds) {
    const owners = members.filter((m) => obligations.some((o) => o.item_id === m.item_id && o.plan_id === plan));
    if (owners.length === 0) {
      throw refusal(
        'unknown_plan',
        `no member (${members.map((m) => m.item).join(', ') || 'none'}) has an obligation in plan ${plan}`,
        {
          recovery: `attach the plan to a member's obligations (plan_id) and apply, or drop --plan-id ${plan}`,
          details: { plan_id: plan, members: members.map((m) => m.item) },
        },
      );
    }
    for (const m of owners) add(m.item_id, plan);
  }
  return out;
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
 * The obligations a member's selection names: a requirement id names one case; a plan id
 * (stored verbatim) names every case of the member in that plan.
 */
export function selectedObligations(
  member: MemberHandle,
  obligations: ObligationRow[],
  selection: string[],
): ObligationRow[] {
  const mine = obligations.filter((o) => o.item_id === member.item_id);
  const picked: ObligationRow[] = [];
  for (const id of selection) {
    const slash = id.indexOf('/');
    const caseKey = slash >= 0 ? id.slice(slash + 1) : id;
    const byCase = mine.filter((o) => o.case_key === caseKey);
    const hits = byCase.length ? byCase : slash >= 0 ? [] : mine.filter((o) => o.plan_id === id);
    for (const o of hits) if (!picked.includes(o)) picked.push(o);
  }
  return picked;
}

/**
 * Run-level QA rows for a member's selection (Q3 item roll-ups): each selected obligation is
 * a row `PREFIX-N/case` at the QA stage that answers it.
 */
async function rollUp(
  db: Executor,
  run: RunRow,
  flow: FlowRow,
  member: MemberHandle,
  selection: string[],
): Promise<string[]> {
  const rows: string[] = [];
  for (const obligation of selectedObligations(member, await obligationsOf(db, [member.item_id]), selection)) {
    const stage = answeringStage(obligation, flow.stages);
    if (!stage) continue; // nothing on this run answers it; D6 already named it
    const checkName = requirementId(member.item, obligation.case_key);
    rows.push(checkName);
    await upsertRollUp(db, {
      run_id: run.run_id,
      check_name: checkName,
      blocking: obligation.blocking,
      stage_name: stage.name,
      // A plan-bound case is answered by a passed execution of its plan.
      plan_id: obligation.plan_id,
    });
  }
  return rows;
}

/** Q3: the flow's default checks, materialized when the run is created. */
export async function materializeFlowDefaults(db: Executor, run: RunRow, flow: FlowRow): Promise<void> {
  for (const stage of flow.stages.filter((s) => s.kind === 'qa')) {
    for (const check of stage.checks) {
      // A plan check at an item-scoped stage is owed per member; the blocking-QA reader lists it.
      if (check.plan && stage.scope === 'item') continue;
      await insertFlowDefault(db, {
        run_id: run.run_id,
        check_name: check.name,
        blocking: check.blocking,
        stage_name: stage.name,
        plan_id: check.plan ?? null,
      });
    }
  }
}

/**
 * Admits members (D3, D5): an explicit selection is stored verbatim on the members it names;
 * a derived one is validated but not stored (the freeze derives it again). Returns the D6
 * warnings.
 */
export async function admitMembers(
  db: Executor,
  run: RunRow,
  flow: FlowRow,
  members: MemberHandle[],
  sel: ExplicitSelection,
): Promise<UntargetedObligation[]> {
  const explicit = await explicitSelections(db, members, sel);
  const warnings: UntargetedObligation[] = [];
  for (const member of members) {
    const stored = explicit.get(member.item_id) ?? null;
    await insertMember(db, run, member.item_id, stored);
    await noteLaterRun(db, member.item_id, run);
    await rollUp(db, run, flow, member, await selectionOf(db, flow, member, stored));
    warnings.push(...untargetedObligations(await obligationsOf(db, [member.item_id]), flow.stages));
  }
  return warnings;
}

export interface CarriedWork {
  /** true once recorded at the freeze; false while derived live (D1). */
  recorded: boolean;
  items: CarriedWorkItem[];
}

/** D1: carried work as recorded at the freeze, or derived live (and unrecorded) before it. */
export async function carriedWork(db: Executor, run: RunRow, flow: FlowRow): Promise<CarriedWork> {
  if (run.carried_work) return { recorded: true, items: run.carried_work };
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
