import type { RunRow } from '../../db/database';
import { defaultCompletionFlowId, itemsById, type ItemRow } from '../../db/items';
import type { Executor } from '../../db/pool';
import { memberStates } from '../../db/runMembers';
import { runById } from '../../db/runs';
import { closingNames } from '../../db/settlement';
import { completionAuthority, type ClosingRun } from '../completion/doneGate';

/** A run's members as settlement sees them: which ones it must close (S2, S6). */
export interface SettlementMember {
  item: ItemRow;
  delivery_intent: 'progress' | 'final';
  closed_at: Date | null;
  /** A final member of the run's own project that this run has completion authority for. */
  required: boolean;
}

export interface SettlementContext {
  run: RunRow;
  closing: ClosingRun;
  members: SettlementMember[];
}

/** Reads the run, what its attribution names, and its members, in a fixed number of statements. */
export async function settlementContext(db: Executor, runId: string): Promise<SettlementContext> {
  const run = await runById(db, runId);
  const [names, rows, defaultFlowId] = await Promise.all([
    closingNames(db, run),
    memberStates(db, runId),
    defaultCompletionFlowId(db, run.project_id),
  ]);
  const items = new Map(
    (
      await itemsById(
        db,
        rows.map((r) => r.item_id),
      )
    ).map((i) => [i.item_id, i]),
  );
  const members: SettlementMember[] = [];
  for (const r of rows) {
    const item = items.get(r.item_id)!;
    members.push({
      item,
      delivery_intent: r.delivery_intent,
      closed_at: r.closed_at,
      required: r.delivery_intent === 'final' && completionAuthority(run, item, defaultFlowId),
    });
  }
  return {
    run,
    closing: { run, owner: names.project, environment: names.environment },
    members,
  };
}
