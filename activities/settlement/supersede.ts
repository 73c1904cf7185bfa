import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { liveItemExecutions } from '../../db/qaExecutions';
import type { BlockReason, DoneGateFacts } from '../../domain/completion';
import { endExecution, noQaEffects, notifyQaOfSettlement, type QaNotifier } from '../qa/ending';
import { DEFAULT_RESERVATION_LIFETIME_MS, inLineTransaction, type LineOptions } from '../waitingLine';
import type { SettlementMember } from './members';

/** What ending an execution from settlement needs: the line's lifetime and wake-ups, the QA signals. */
export interface SettlementEnds {
  line?: Partial<LineOptions>;
  qaNotifier?: QaNotifier;
  /**
   * The session settling, when a person does (the driver's replay, under its own role): an
   * execution's lease is released in its name, as terminalize does. The workflow settles as yoke.
   */
  actingSessionId?: string;
}

export const SUPERSEDED_BY_RUN_SCOPED_ITEM_QA = 'superseded-by-run-scoped-item-qa';

/**
 * S4: a member whose run-scoped QA is satisfied no longer needs an item-level execution that
 * has not started (cursor_ordinal 0, no recorded case): settlement ends it superseded, which
 * cancels its waits and releases any lease in the same transaction (W9). An execution that has
 * recorded a case keeps refusing the member: its verdicts are somebody's work in progress.
 * Returns the members' refusal reasons.
 */
export async function supersedeItemExecutions(
  db: Kysely<Database>,
  ends: SettlementEnds,
  runId: string,
  members: SettlementMember[],
  facts: Map<number, DoneGateFacts>,
): Promise<Map<number, BlockReason[]>> {
  const reasons = new Map<number, BlockReason[]>();
  const live = await liveItemExecutions(
    db,
    runId,
    members.map((m) => m.item.item_id),
  );
  if (live.length === 0) return reasons;
  const satisfied = (itemId: number) =>
    (facts.get(itemId)?.runQa ?? []).every((q) => q.status === 'passed' || q.status === 'waived');
  const superseding = live.filter((e) => satisfied(e.item_id) && e.cursor_ordinal === 0 && !e.has_result);
  for (const e of live.filter((x) => !superseding.includes(x))) {
    const item = members.find((m) => m.item.item_id === e.item_id)!.item.item;
    reasons.set(e.item_id, [
      ...(reasons.get(e.item_id) ?? []),
      {
        code: 'item_qa_execution_live',
        message: `${item}'s item-level QA execution ${e.execution_id} is running${e.has_result ? ' with recorded cases' : ''}`,
        recovery: `let it finish (yoke qa watch ${e.execution_id}) or end it (yoke qa abort ${e.execution_id} --reason R); its end replays the settlement`,
      },
    ]);
  }
  if (superseding.length) {
    const qa = noQaEffects();
    await inLineTransaction(db, ends.line?.notifier, async (trx, effects) => {
      for (const e of superseding)
        await endExecution(
          trx,
          e.execution_id,
          'superseded',
          SUPERSEDED_BY_RUN_SCOPED_ITEM_QA,
          { sessionId: ends.actingSessionId ?? null, actorId: 'yoke' },
          ends.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS,
          effects,
          qa,
        );
    });
    await notifyQaOfSettlement(ends.qaNotifier, qa, runId);
  }
  return reasons;
}
