import type { RunRow } from '../../db/database';
import { recordEvent } from '../../db/events';
import {
  completionWalks,
  defaultCompletionFlowId,
  dependenciesOf,
  markMembersClosed,
  memberQaRows,
  releaseClaimsOfItems,
  unansweredObligations,
  writeDoneMany,
  writeStatus,
  type DependencyRow,
  type ItemRow,
} from '../../db/items';
import { MEMBER_CLOSED_EVENT } from '../../db/invariants';
import type { Executor } from '../../db/pool';
import {
  dependencyUnmet,
  doneGateReasons,
  type BlockReason,
  type ClosingTogether,
  type DoneGateFacts,
  type ItemStatus,
} from '../../domain/completion';
import { refusal } from '../../domain/errors';

/** The run a done write closes through, with what its attribution names (D7). */
export interface ClosingRun {
  run: Pick<RunRow, 'run_id' | 'candidate_sha' | 'project_id'>;
  owner: string;
  environment: string;
}

/**
 * D8: whether a run has completion authority for an item: a run of the item's selected (else
 * the project's default) completion flow in the item's own project. (Another project's run
 * with a bound source commit also reads as authority through the walk; it closes nothing here.)
 */
export async function hasCompletionAuthority(
  db: Executor,
  run: Pick<RunRow, 'project_id' | 'flow_id'>,
  item: Pick<ItemRow, 'project_id' | 'completion_flow_id'>,
): Promise<boolean> {
  if (run.project_id !== item.project_id) return false;
  return completionAuthority(
    run,
    item,
    item.completion_flow_id === null ? await defaultCompletionFlowId(db, item.project_id) : undefined,
  );
}

/** hasCompletionAuthority with the run's project default completion flow already read (one read for many items). */
export function completionAuthority(
  run: Pick<RunRow, 'project_id' | 'flow_id'>,
  item: Pick<ItemRow, 'project_id' | 'completion_flow_id'>,
  projectDefaultFlowId: number | undefined,
): boolean {
  return run.project_id === item.project_id && (item.completion_flow_id ?? projectDefaultFlowId) === run.flow_id;
}

/**
 * The done gate's facts for many items at once, in a fixed number of statements: the walk,
 * the closing run's roll-up rows, the unanswered obligations and the stamped prerequisites.
 */
export async function readDoneGateFacts(
  db: Executor,
  closing: Pick<RunRow, 'run_id' | 'candidate_sha'>,
  items: ItemRow[],
  opts: { together?: ClosingTogether; dependencies?: DependencyRow[] } = {},
): Promise<Map<number, DoneGateFacts>> {
  const ids = items.map((i) => i.item_id);
  const { together } = opts;
  const [walks, qa, unanswered, dependencies] = await Promise.all([
    completionWalks(db, ids),
    memberQaRows(db, closing.run_id),
    unansweredObligations(db, closing, ids),
    opts.dependencies ?? dependenciesOf(db, ids), // a caller that read them already passes them
  ]);
  const unmet = (itemId: number) =>
    dependencies
      .filter((d) => d.item_id === itemId && dependencyUnmet(d, together))
      .map((d) => ({ item: d.depends_on, environment: d.environment }));
  const facts = new Map<number, DoneGateFacts>();
  for (const item of items) {
    const walk = walks.get(item.item_id);
    const read = walk?.completion_runs.find((r) => r.run_id === walk.read_run_id) ?? null;
    facts.set(item.item_id, {
      item: item.item,
      readRun: read && { run_id: read.run_id, status: read.status, settling: read.settling },
      closingRunId: closing.run_id,
      runQa: qa.get(item.item) ?? [],
      unanswered: unanswered.filter((u) => u.item_id === item.item_id),
      prepared:
        item.delivery_evidence.rung?.run === closing.run_id && item.delivery_evidence.preflight?.run === closing.run_id,
      unmetDependencies: unmet(item.item_id),
    });
  }
  return facts;
}

export function doneGateRefusal(item: string, reasons: BlockReason[]) {
  return refusal('done_gate_refused', `${item} cannot be done: ${reasons.map((r) => r.message).join('; ')}`, {
    recovery: reasons.map((r) => r.recovery).join('; '),
    details: { item, reasons },
  });
}

export interface StatusWriteResult {
  item: string;
  status: ItemStatus;
  /** This write moved the item to its status (false: it already was, e.g. done before). */
  changed: boolean;
  released_claims: { claim_id: number; session_id: string }[];
}

/**
 * The done write for a set of items that passed their gates, inside the caller's transaction
 * and committing nothing itself, in a fixed number of statements whatever the set's size (S2):
 * done and the completed_deliveries attribution (D7) in one, the claim release of the items it
 * moved to done in another. An item already done only gains the attribution, once.
 */
export async function writeItemsDone(
  trx: Executor,
  items: ItemRow[],
  closing: ClosingRun,
): Promise<StatusWriteResult[]> {
  const recordedAt = new Date().toISOString();
  const changed = await writeDoneMany(
    trx,
    items.map((item) => ({
      item_id: item.item_id,
      delivery: {
        owner: closing.owner,
        member: item.item,
        run: closing.run.run_id,
        environment: closing.environment,
        candidate: closing.run.candidate_sha,
        recorded_at: recordedAt,
      },
    })),
  );
  const released = new Map<number, { claim_id: number; session_id: string }[]>();
  for (const c of await releaseClaimsOfItems(
    trx,
    items.filter((i) => changed.get(i.item_id)).map((i) => i.item_id),
    `delivered by run ${closing.run.run_id}`,
  )) {
    released.set(c.item_id, [...(released.get(c.item_id) ?? []), { claim_id: c.claim_id, session_id: c.session_id }]);
  }
  return items.map((item) => ({
    item: item.item,
    status: 'done' as const,
    changed: changed.get(item.item_id) ?? false,
    released_claims: released.get(item.item_id) ?? [],
  }));
}

/**
 * The ordinary item status write, run inside the caller's transaction (it commits nothing
 * itself). A done write passes the done gate, publishes completed_deliveries, releases the
 * item's claims and marks the closing membership closed; an item already done gains only the
 * attribution.
 */
export async function writeItemStatus(
  trx: Executor,
  input: {
    item: ItemRow;
    to: ItemStatus;
    closing?: ClosingRun;
    facts?: DoneGateFacts;
    sessionId?: string | null;
  },
): Promise<StatusWriteResult> {
  const { item } = input;
  if (input.to !== 'done') {
    await writeStatus(trx, item.item_id, input.to);
    return { item: item.item, status: input.to, changed: item.status !== input.to, released_claims: [] };
  }
  const closing = input.closing;
  if (!closing) throw new Error('a done write names the run it closes through');
  const facts = input.facts ?? (await readDoneGateFacts(trx, closing.run, [item])).get(item.item_id)!;
  const reasons = item.status === 'done' ? [] : doneGateReasons(facts);
  if (reasons.length) throw doneGateRefusal(item.item, reasons);
  const [result] = await writeItemsDone(trx, [item], closing);
  await markMembersClosed(trx, closing.run.run_id, [item.item_id]);
  if (result!.changed) {
    await recordEvent(trx, {
      event_type: MEMBER_CLOSED_EVENT,
      project_id: item.project_id,
      session_id: input.sessionId ?? null,
      payload: {
        item: item.item,
        run_id: closing.run.run_id,
        released_claims: result!.released_claims.map((c) => c.claim_id),
      },
    });
  }
  return result!;
}
