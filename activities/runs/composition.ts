import type { Kysely } from 'kysely';
import { owedDeliveryReadyItems } from '../../db/composition';
import type { Database, FlowRow, RunRow } from '../../db/database';
import { completionWalks, defaultCompletionFlow, dependenciesOf, itemsById, type ItemRow } from '../../db/items';
import type { Executor } from '../../db/pool';
import { environmentById, flowById, obligationsOf, runById, runFlow, type ObligationRow } from '../../db/runs';
import { memberStates } from '../../db/runMembers';
import { untargetedObligations, type UntargetedObligation } from '../../domain/admission';
import { dependencyUnmet } from '../../domain/completion';
import { refusal, type YokeError } from '../../domain/errors';
import { drivesNothing } from '../../domain/runStatuses';
import { completionAuthority, hasCompletionAuthority } from '../completion/doneGate';

export interface CompositionResult {
  code: 'item_qa_no_member_owes_target';
  stage: string;
  message: string;
}

export interface SupplementalWarning {
  code: 'supplemental_proof_not_credited';
  item: string;
  message: string;
}

/** D7: a member this run would close has a dependency not yet satisfied; settlement holds it. */
export interface DependencyWarning {
  code: 'dependency_unsatisfied';
  item: string;
  depends_on: string;
  environment: string | null;
  message: string;
}

export interface Composition {
  refusals: YokeError[];
  results: CompositionResult[];
  warnings: (UntargetedObligation | SupplementalWarning | DependencyWarning)[];
}

/** D7: the members a composition found with an unsatisfied dependency (settlement would hold them). */
export function dependencyWarnings(c: Composition): DependencyWarning[] {
  return c.warnings.filter((w): w is DependencyWarning => w.code === 'dependency_unsatisfied');
}

const PERSISTENT_TIERS = ['stage', 'production'];

/**
 * What composition judges, read before it: the members in item_id order (the item's project,
 * status and completion flow, the membership's delivery intent), their obligations and the
 * run's target. `defaultCompletionFlowId`, when given, is the run's project's completion flow
 * (null: none), so the authority checks read nothing more.
 */
export interface CompositionInputs {
  members: (Pick<ItemRow, 'item_id' | 'item' | 'project_id' | 'status' | 'completion_flow_id'> & {
    delivery_intent: 'progress' | 'final';
  })[];
  obligations: ObligationRow[];
  target: { name: string; tier: string };
  defaultCompletionFlowId?: number | null;
}

async function readCompositionInputs(db: Executor, run: RunRow): Promise<CompositionInputs> {
  const memberRows = await memberStates(db, run.run_id);
  const items = await itemsById(
    db,
    memberRows.map((m) => m.item_id),
  );
  const target = await environmentById(db, run.target_environment_id);
  const obligations = await obligationsOf(
    db,
    items.map((m) => m.item_id),
  );
  const members = items.map((m) => ({
    ...m,
    delivery_intent: memberRows.find((r) => r.item_id === m.item_id)!.delivery_intent,
  }));
  return { members, obligations, target };
}

/** The name of the flow that closes an item: its own completion_flow, else its project's default. */
async function completionFlowOf(
  db: Executor,
  m: Pick<ItemRow, 'project_id' | 'completion_flow_id'>,
): Promise<string | null> {
  if (m.completion_flow_id !== null) return (await flowById(db, m.completion_flow_id)).name;
  return (await defaultCompletionFlow(db, m.project_id))?.name ?? null;
}

const itemScopedStages = (flow: FlowRow) => flow.stages.filter((s) => s.kind === 'qa' && s.scope === 'item');

/**
 * D9: whether composition reads the owed delivery-ready items: a memberless run with item-scoped
 * QA, at the freeze or a validation. With its inputs given, the freeze reads nothing else, so
 * execute judges it before the origin locks when this is false.
 */
export function readsOwedItems(flow: FlowRow, memberCount: number, when: CompositionWhen): boolean {
  return itemScopedStages(flow).length > 0 && memberCount === 0 && (when === 'validate' || when === 'freeze');
}

type CompositionWhen = 'create' | 'add_item' | 'freeze' | 'validate';

/**
 * validate_composition (D6, D9, D10): what a run's flow, target and members allow, read at
 * create, add-item, the executing freeze and `deployment-runs validate`. Refusals are
 * returned, not thrown, so every one can be named; `when` picks the checks of each moment.
 * `inputs`, when the caller has read them already, spares the reads.
 */
export async function composition(
  db: Executor,
  run: RunRow,
  flow: FlowRow,
  when: CompositionWhen,
  inputs?: CompositionInputs,
): Promise<Composition> {
  const out: Composition = { refusals: [], results: [], warnings: [] };
  const { members, obligations, target, defaultCompletionFlowId } = inputs ?? (await readCompositionInputs(db, run));
  const authority = async (m: CompositionInputs['members'][number]) =>
    defaultCompletionFlowId === undefined
      ? hasCompletionAuthority(db, run, m)
      : completionAuthority(run, m, defaultCompletionFlowId ?? undefined);
  const itemScoped = itemScopedStages(flow);
  // At create (and start-for-item) a refusal rolls the run back: it is never made, so nothing
  // names it and no recovery acts on it.
  const made = when !== 'create';
  const subject = made ? `run ${run.run_id}` : `a run of flow ${flow.name}`;
  const runId = made ? { run_id: run.run_id } : {};

  // D9: a custody-free flow cannot prove members at an item-scoped QA stage.
  if (itemScoped.length && !flow.delivery_custody && members.length) {
    out.refusals.push(
      refusal(
        'item_qa_flow_without_delivery_custody',
        `flow ${flow.name} has item-scoped QA (${itemScoped.map((s) => s.name).join(', ')}) but takes no delivery custody, so it cannot prove members ${members.map((m) => m.item).join(', ')}`,
        {
          // At create the run is not made: there is no run to remove an item from.
          recovery: made
            ? `deliver them through a flow with delivery_custody: true, or remove them: yoke deployment-runs remove-item ${run.run_id} ITEM --reason R`
            : `name a flow with delivery_custody: true (--flow F), or create the run without ${members.map((m) => `--item ${m.item}`).join(' ')}`,
          details: { ...runId, flow: flow.name, members: members.map((m) => m.item) },
        },
      ),
    );
  }

  // D9: a memberless item-scoped QA run of the completion flow owes the delivery-ready items
  // no other release holds by landing custody.
  if (readsOwedItems(flow, members.length, when)) {
    const owed = await owedDeliveryReadyItems(db, run, flow.flow_id);
    if (owed.length) {
      out.refusals.push(
        refusal(
          'item_qa_run_without_members',
          `run ${run.run_id} has item-scoped QA but no members, while its flow ${flow.name} is the completion flow of delivery-ready ${owed.join(', ')}`,
          {
            recovery: `add them: yoke deployment-runs add-item ${run.run_id} ${owed[0]}, or cancel: yoke deployment-runs terminalize ${run.run_id} --disposition cancelled --reason R`,
            details: { run_id: run.run_id, owed },
          },
        ),
      );
    } else {
      for (const s of itemScoped) {
        out.results.push({
          code: 'item_qa_no_member_owes_target',
          stage: s.name,
          message: `stage ${s.name} passes: no member owes delivery to ${s.target}`,
        });
      }
    }
  }

  // D9: a final-delivery release refuses a same-project final member it could not close.
  if (flow.delivery_custody && PERSISTENT_TIERS.includes(target.tier)) {
    for (const m of members) {
      if (m.project_id !== run.project_id || m.delivery_intent !== 'final' || m.status === 'done') continue;
      if (await authority(m)) continue;
      // at create, the way that works: the item through the flow that closes it
      const closing = made ? null : await completionFlowOf(db, m);
      out.refusals.push(
        refusal(
          'final_member_not_closable',
          `${subject}${made ? ` (flow ${flow.name})` : ''} is a final delivery to ${target.name} but cannot close ${m.item}: its completion flow is another flow`,
          {
            recovery: made
              ? `select ${flow.name} as ${m.item}'s completion_flow in the project definition and apply, or remove it (yoke deployment-runs remove-item ${run.run_id} ${m.item} --reason R), or cancel: yoke deployment-runs terminalize ${run.run_id} --disposition cancelled --reason R`
              : `select ${flow.name} as ${m.item}'s completion_flow in the project definition and apply, or deliver ${m.item} through its completion flow${closing ? ` (yoke deployment-runs start-for-item ${m.item} --flow ${closing})` : ''}, or create the run without --item ${m.item}`,
            details: { ...runId, item: m.item, flow: flow.name },
          },
        ),
      );
    }
  }

  // D6: obligations no QA stage targets are named, never an error.
  out.warnings.push(...untargetedObligations(obligations, flow.stages));

  // D7: the done gate holds a member whose dependency is unsatisfied; named before the run
  // executes (the freeze leaves it to settlement, which refuses run_settlement_blocked). A run
  // that can never move again (cancelled, succeeded, taken over) settles nothing: not said of it.
  if (when !== 'freeze' && !drivesNothing(run)) {
    const closing: CompositionInputs['members'] = [];
    for (const m of members) if (m.status !== 'done' && (await authority(m))) closing.push(m);
    const ids = closing.map((m) => m.item_id);
    for (const d of await dependenciesOf(db, ids)) {
      if (!dependencyUnmet(d, { itemIds: ids, environment: target.name })) continue;
      const item = closing.find((m) => m.item_id === d.item_id)!.item;
      out.warnings.push({
        code: 'dependency_unsatisfied',
        item,
        depends_on: d.depends_on,
        environment: d.environment || null,
        message: `${item} depends on ${d.depends_on}${d.environment ? ` delivered to ${d.environment}` : ' done'}, not yet satisfied: settlement of ${run.run_id} will hold ${item} until it is`,
      });
    }
  }

  // D10: a supplemental membership answers only with the final run's commit.
  if (when === 'add_item' || when === 'validate') {
    const walks = await completionWalks(
      db,
      members.map((m) => m.item_id),
    );
    for (const m of members) {
      if (m.project_id === run.project_id && (await authority(m))) continue;
      const walk = walks.get(m.item_id);
      const final = walk?.completion_runs.find(
        (r) => r.run_id === walk.read_run_id && r.status !== 'failed' && r.status !== 'cancelled',
      );
      if (final && final.run_id !== run.run_id && final.candidate_sha === run.candidate_sha) continue;
      out.warnings.push({
        code: 'supplemental_proof_not_credited',
        item: m.item,
        message: final
          ? `${m.item}'s final run ${final.run_id} delivers ${final.candidate_sha}, not ${run.candidate_sha}: proof from ${run.run_id} will not be credited`
          : `${m.item} has no final run whose commit ${run.candidate_sha} matches: proof from ${run.run_id} will not be credited`,
      });
    }
  }
  return out;
}

/** Throws the first refusal, naming every one in its details. */
export function assertComposition(c: Composition): void {
  if (c.refusals.length === 0) return;
  const [first, ...rest] = c.refusals;
  first!.details.other_refusals = rest.map((r) => r.toJSON());
  throw first;
}

/** `yoke deployment-runs validate RUN`: the composition now, refusing with the first refusal. */
export function compositionActivities(deps: { db: Kysely<Database> }) {
  async function validateRun(input: { runId: string }) {
    const run = await runById(deps.db, input.runId);
    const flow = await runFlow(deps.db, run);
    const c = await composition(deps.db, run, flow, 'validate');
    assertComposition(c);
    return { run_id: run.run_id, valid: true, results: c.results, warnings: c.warnings };
  }
  return { validateRun };
}
