import type { StageDefinition } from '../../domain/projectDefinition';
import type { ExecuteMember, RollUpRow } from '../../db/runExecution';
import type { ObligationRow } from '../../db/runs';
import { answeringStage, derivedSelection, requirementId } from '../../domain/admission';
import { selectedObligations, type CarriedWork } from './membership';

/** What the executing freeze writes, decided from the members and obligations execute read. */
export interface FreezePlan {
  selections: { item_id: number; selection: string[] }[];
  rollUps: RollUpRow[];
  rollUpPatterns: string[];
  carried: CarriedWork;
}

/**
 * D5 freeze: every derived selection is resolved now and written back concrete, and its
 * roll-ups are derived again: an obligation waived or superseded since admission loses the
 * provisional row it had (retracted, so it cannot hold the QA stage), a new one gains a row.
 * A stored selection is carried as it is.
 */
export function planFreeze(
  members: Pick<ExecuteMember, 'item_id' | 'item' | 'requirement_selection'>[],
  obligations: ObligationRow[],
  stages: StageDefinition[],
): FreezePlan {
  const plan: FreezePlan = { selections: [], rollUps: [], rollUpPatterns: [], carried: { recorded: true, items: [] } };
  for (const m of members) {
    const mine = obligations.filter((o) => o.item_id === m.item_id);
    const selection = m.requirement_selection ?? derivedSelection(mine, stages);
    if (!m.requirement_selection) {
      plan.selections.push({ item_id: m.item_id, selection });
      for (const o of selectedObligations(m, mine, selection)) {
        const stage = answeringStage(o, stages);
        if (!stage) continue; // nothing on this run answers it; D6 already named it
        plan.rollUps.push({
          check_name: requirementId(m.item, o.case_key),
          blocking: o.blocking,
          stage_name: stage.name,
          // A plan-bound case is answered by a passed execution of its plan.
          plan_id: o.plan_id,
        });
      }
      plan.rollUpPatterns.push(`${m.item}/%`);
    }
    plan.carried.items.push({ item: m.item, requirement_ids: selection, derived: !m.requirement_selection });
  }
  return plan;
}
