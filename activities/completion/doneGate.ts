import { sql } from 'kysely';
import type { RunRow } from '../../db/database';
import { recordEvent } from '../../db/events';
import {
  completionWalks,
  defaultCompletionFlowId,
  memberQaRows,
  releaseItemClaims,
  unansweredObligations,
  writeDone,
  writeStatus,
  type ItemRow,
} from '../../db/items';
import { MEMBER_CLOSED_EVENT } from '../../db/invariants';
import type { Executor } from '../../db/pool';
import { doneGateReasons, type BlockReason, type DoneGateFacts, type ItemStatus } from '../../domain/completion';
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
  const flowId = item.completion_flow_id ?? (await defaultCompletionFlowId(db, item.project_id));
  return flowId === run.flow_id;
}

/**
 * The done gate's facts for many items at once, in a fixed number of statements: the walk,
 * the closing run's roll-up rows, the unanswered obligations and the stamped prerequisites.
 */
export async function readDoneGateFacts(
  db: Executor,
  closing: Pick<RunRow, 'run_id' | 'candidate_sha'>,
  items: ItemRow[],
): Promise<Map<number, DoneGateFacts>> {
  const ids = items.map((i) => i.item_id);
  const [walks, qa, unanswered] = await Promise.all([
    completionWalks(db, ids),
    memberQaRows(db, closing.run_id),
    unansweredObligations(db, closing, ids),
  ]);
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
 * The ordinary item status write, run inside the caller's transaction (S2: the settlement's
 * own connection passes its transaction here and this commits nothing itself). A done write
 * passes the done gate, publishes completed_deliveries, releases the item's claims and marks
 * the closing membership closed; an item already done gains only the attribution.
 */
export async function writeItemStatus(
  trx: Executor,
  input: {
    item: ItemRow;
    to: ItemStatus;
    closing?: ClosingRun;
    facts?: DoneGateFacts;
    sessionId?: string | null;
    /** The settlement marks its closed memberships and records ItemDone for the whole set at once. */
    batchClose?: boolean;
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
  const changed = await writeDone(trx, item.item_id, {
    owner: closing.owner,
    member: item.item,
    run: closing.run.run_id,
    environment: closing.environment,
    candidate: closing.run.candidate_sha,
    recorded_at: new Date().toISOString(),
  });
  const released = changed ? await releaseItemClaims(trx, item.item_id, `delivered by run ${closing.run.run_id}`) : [];
  if (input.batchClose) return { item: item.item, status: 'done', changed, released_claims: released };
  await trx
    .updateTable('deployment_run_items')
    .set({ closed_at: sql`clock_timestamp()` })
    .where('run_id', '=', closing.run.run_id)
    .where('item_id', '=', item.item_id)
    .where('closed_at', 'is', null)
    .execute();
  if (changed) {
    await recordEvent(trx, {
      event_type: MEMBER_CLOSED_EVENT,
      project_id: item.project_id,
      session_id: input.sessionId ?? null,
      payload: { item: item.item, run_id: closing.run.run_id, released_claims: released.map((c) => c.claim_id) },
    });
  }
  return { item: item.item, status: 'done', changed, released_claims: released };
}
