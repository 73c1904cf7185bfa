import { dependenciesOf } from '../../db/items';
import { closureMembers, releaseLineage, type LineageEntry } from '../../db/memberClosure';
import type { Executor } from '../../db/pool';
import { environmentById, obligationsOf, runById, runFlow } from '../../db/runs';
import { derivedSelection, untargetedObligations } from '../../domain/admission';
import { dependencySatisfied, doneGateReasons, type BlockReason } from '../../domain/completion';
import { readDoneGateFacts } from '../completion/doneGate';
import { selectedObligations } from './membership';

/**
 * What settlement would do with one member: `closed` (already closed by this run), `clear`
 * (its done gate passes), `blocked` (its own reasons), `not_closed_by_run` (a progress member
 * or one this run has no completion authority for: settlement leaves it open).
 */
export type MemberSettlement = 'closed' | 'clear' | 'blocked' | 'not_closed_by_run';

export interface MemberClosure {
  item: string;
  delivery_intent: 'progress' | 'final';
  /** The current canonical prerequisites: the S2 stamps for this run and the item's dependencies (D7). */
  prerequisites: {
    delivery_rung_for_run: boolean;
    status_preflight_for_run: boolean;
    dependencies: { item: string; environment: string | null; status: string; satisfied: boolean }[];
  };
  requirement_ids: string[];
  phases: string[];
  targets: (string | null)[];
  settlement: MemberSettlement;
  /** D2: the member's own settlement is blocked (not the count of run-bound QA rows). */
  blocked: boolean;
  blocked_reasons: BlockReason[];
  /** Not blocked itself, but an atomic sibling is: the commit closes none of them (S2). */
  held_with_run: boolean;
  /** The other members this run's settlement commit closes with it, all or none (S2). */
  atomic_siblings: string[];
  other_target_deferrals: string[];
}

export interface MemberClosureView {
  members: MemberClosure[];
  release_lineage: LineageEntry[];
}

/**
 * D2: the member closure diagnostic, computed only when asked, in a fixed number of
 * statements whatever the member count (run, flow, members with completion authority, its
 * target, obligations, dependencies, lineage, and the done gate's three other batched reads). It changes
 * nothing: it runs no close-out and writes no QA, acceptance or lifecycle.
 */
export async function memberClosure(db: Executor, runId: string): Promise<MemberClosureView> {
  const run = await runById(db, runId);
  const [flow, members, lineage] = await Promise.all([
    runFlow(db, run),
    closureMembers(db, run),
    releaseLineage(db, runId),
  ]);
  const ids = members.map((m) => m.item_id);
  // S2: the members settlement would close together (a dependency among them closes with them, D7).
  const together = {
    itemIds: members.filter((m) => m.required && !m.closed_at && m.status !== 'done').map((m) => m.item_id),
    environment: (await environmentById(db, run.target_environment_id)).name,
  };
  const [obligations, dependencies] = await Promise.all([obligationsOf(db, ids), dependenciesOf(db, ids)]);
  const facts = await readDoneGateFacts(db, run, members, { together, dependencies });
  // Settlement commits the prerequisites itself before any status write (S2), so a missing
  // stamp is reported under prerequisites, not as a block.
  const gate = new Map(
    members.map((m) => [m.item_id, doneGateReasons(facts.get(m.item_id)!).filter((r) => r.code !== 'not_prepared')]),
  );
  const settlementOf = (m: (typeof members)[number]): MemberSettlement => {
    if (m.closed_at || m.status === 'done') return 'closed';
    if (!m.required) return 'not_closed_by_run';
    return gate.get(m.item_id)!.length ? 'blocked' : 'clear';
  };
  // S2: the commit closes every required, unclosed member at once; any refusal closes none
  const atomicSet = members.filter((m) => settlementOf(m) === 'clear' || settlementOf(m) === 'blocked');
  const anyBlocked = atomicSet.some((m) => settlementOf(m) === 'blocked');
  return {
    release_lineage: lineage,
    members: members.map((m) => {
      const own = obligations.filter((o) => o.item_id === m.item_id);
      const selection = m.requirement_selection ?? derivedSelection(own, flow.stages);
      // D5: a selection is stored verbatim (a bare case, PREFIX-N/case in any case, a plan id):
      // read through admission's one reader, as the roll-ups and `items requirements` are.
      const selected = selectedObligations(m, own, selection);
      const settlement = settlementOf(m);
      const inAtomicSet = atomicSet.includes(m);
      return {
        item: m.item,
        delivery_intent: m.delivery_intent,
        prerequisites: {
          delivery_rung_for_run: m.delivery_evidence.rung?.run === run.run_id,
          status_preflight_for_run: m.delivery_evidence.preflight?.run === run.run_id,
          dependencies: dependencies
            .filter((d) => d.item_id === m.item_id)
            .map((d) => ({
              item: d.depends_on,
              environment: d.environment || null,
              status: d.status,
              satisfied: dependencySatisfied({ status: d.status, evidence: d.delivery_evidence }, d.environment),
            })),
        },
        requirement_ids: selection,
        phases: [...new Set(selected.map((o) => o.qa_phase))],
        targets: [...new Set(selected.map((o) => o.target_env))],
        settlement,
        blocked: settlement === 'blocked',
        blocked_reasons: settlement === 'blocked' ? gate.get(m.item_id)! : [],
        held_with_run: settlement === 'clear' && anyBlocked,
        atomic_siblings: inAtomicSet ? atomicSet.filter((s) => s !== m).map((s) => s.item) : [],
        other_target_deferrals: untargetedObligations(own, flow.stages).map((u) => u.message),
      };
    }),
  };
}
