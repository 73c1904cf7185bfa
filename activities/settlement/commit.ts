import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../../db/database';
import { itemsById, lockItemStates, markMembersClosed, stampEvidenceOfItems, type ItemRow } from '../../db/items';
import { recordEvents } from '../../db/events';
import type { Executor } from '../../db/pool';
import { openQaStatuses } from '../../db/runQa';
import { approvalsOf } from '../../db/runStages';
import { lockSettlementState, markSettlementCommitted, recordSettlementBlocked } from '../../db/settlement';
import { doneGateReasons, type BlockReason } from '../../domain/completion';
import { refusal, YokeError } from '../../domain/errors';
import { readDoneGateFacts, writeItemsDone } from '../completion/doneGate';
import { settlementContext, type SettlementContext } from './members';
import { supersedeItemExecutions, type SettlementEnds } from './supersede';

export interface BlockedMember {
  item: string;
  reasons: BlockReason[];
}

/** S2: the refusal leads with run_settlement_blocked, names each blocked member and holds the rest. */
export function settlementBlocked(runId: string, blocked: BlockedMember[], held: string[]): YokeError {
  const named = blocked.map((b) => `${b.item} (${b.reasons.map((r) => r.message).join('; ')})`).join(', ');
  return refusal(
    'run_settlement_blocked',
    `run ${runId} cannot settle: blocked ${named}${held.length ? `; held with the run: ${held.join(', ')}` : ''}`,
    {
      recovery: [...new Set(blocked.flatMap((b) => b.reasons.map((r) => r.recovery)))].join('; '),
      details: { run_id: runId, blocked, held },
    },
  );
}

export interface CommitOutcome {
  run_id: string;
  status: string;
  /** Members this commit moved to done. */
  closed: string[];
  /** Members already done that only gained attribution (never closed twice). */
  attributed: string[];
  /** The commit had happened before (a replay). */
  already_committed: boolean;
}

/** Counts the statements a transaction issues, for the commit-phase benchmark. */
export type StatementCounter = { statements: number };

/**
 * The commit phase (S2) on one connection: the cleared members' prerequisites (delivery_evidence
 * rung and status preflight, idempotent, closing nothing) commit first, in one statement of
 * their own, because the done gates read them on their own connections. Then the required
 * members are compared with the cleared ones: any not cleared refuses before a status write is
 * staged. Then every member's terminal status and claim release is written through the
 * ordinary done write inside this transaction, set-based (a fixed number of statements whatever
 * the member count, where one savepoint per member cost about five statements each), and the
 * whole set commits once; any refusal rolls back every member.
 */
export async function commitSettlement(
  db: Kysely<Database>,
  runId: string,
  ends: SettlementEnds = {},
): Promise<CommitOutcome> {
  return db.connection().execute(async (conn) => {
    const ctx = await settlementContext(conn, runId);
    const { run } = ctx;
    const outcome = (closed: string[], attributed: string[], already: boolean): CommitOutcome => ({
      run_id: run.run_id,
      status: run.status,
      closed,
      attributed,
      already_committed: already,
    });
    if (run.status !== 'executing' || run.settlement_committed_at) return outcome([], [], true);
    if (!run.settling_at) {
      throw refusal(
        'run_not_settling',
        `run ${run.run_id} has not reached settlement (stage ${run.current_stage ?? 'none'})`,
        {
          recovery: `let its stages finish: yoke deployment-runs watch ${run.run_id}`,
          details: { run_id: run.run_id, current_stage: run.current_stage },
        },
      );
    }
    const required = ctx.members.filter((m) => m.required);
    const facts = await readDoneGateFacts(
      conn,
      run,
      required.map((m) => m.item),
      {
        together: {
          itemIds: required.filter((m) => m.item.status !== 'done').map((m) => m.item.item_id),
          environment: ctx.closing.environment,
        },
      },
    );
    // S4: resultless item-level executions of members whose run-scoped QA is satisfied end here.
    const live = await supersedeItemExecutions(
      conn,
      ends,
      run.run_id,
      required.filter((m) => m.item.status !== 'done'),
      facts,
    );
    const blocked: BlockedMember[] = [];
    const cleared = [];
    for (const m of required) {
      const reasons =
        m.item.status === 'done'
          ? []
          : [
              ...doneGateReasons({ ...facts.get(m.item.item_id)!, prepared: true }),
              ...(live.get(m.item.item_id) ?? []),
            ];
      if (reasons.length) blocked.push({ item: m.item.item, reasons });
      else cleared.push(m);
    }
    await stampPrerequisites(
      conn,
      ctx,
      cleared.filter((m) => m.item.status !== 'done').map((m) => m.item.item_id),
    );
    if (blocked.length) {
      const held = ctx.members.map((m) => m.item.item).filter((i) => !blocked.some((b) => b.item === i));
      throw await recordBlocked(conn, run.run_id, settlementBlocked(run.run_id, blocked, held));
    }
    try {
      return await conn.transaction().execute(async (trx) => {
        const locked = await lockSettlementState(trx, run.run_id);
        if (locked.status !== 'executing' || locked.settlement_committed_at) return outcome([], [], true);
        const written = await writeMembers(trx, ctx, facts);
        await markSettlementCommitted(trx, run.run_id);
        return outcome(written.closed, written.attributed, false);
      });
    } catch (err) {
      if (err instanceof YokeError && err.code === 'run_settlement_blocked')
        throw await recordBlocked(conn, run.run_id, err);
      throw err;
    }
  });
}

/**
 * The prerequisites of the cleared members, committed before any status write: one statement
 * for the whole set (its own transaction, or the caller's). They close nothing and are
 * idempotent: a replay keeps the first stamps.
 */
export async function stampPrerequisites(
  conn: Kysely<Database>,
  ctx: SettlementContext,
  itemIds: number[],
): Promise<void> {
  if (itemIds.length === 0) return;
  const { run, closing } = ctx;
  const now = new Date().toISOString();
  const [qa, approved] = await Promise.all([openQaStatuses(conn, run.run_id), approvalsOf(conn, run.run_id)]);
  const items = await itemsById(conn, itemIds);
  await stampEvidenceOfItems(
    conn,
    items.map((item) => ({
      item_id: item.item_id,
      run: run.run_id,
      rung: {
        rung: 'released',
        run: run.run_id,
        environment: closing.environment,
        candidate: run.candidate_sha,
        stamped_at: now,
      },
      preflight: {
        run: run.run_id,
        qa: qa
          .filter((q) => q.check_name.startsWith(`${item.item}/`))
          .map((q) => ({ requirement_id: q.check_name, status: q.status })),
        approvals: approved,
        stamped_at: now,
      },
    })),
  );
}

/**
 * Every member's status write inside the caller's transaction, set-based: each member's gate
 * is judged first (the locked row against the facts read above), and any refusal refuses the
 * whole set before anything is written, naming every blocked member. Then the ordinary done
 * write for the whole set, memberships closed and ItemDone recorded: a fixed number of
 * statements whatever the member count, each atomic, so a database refusal of any one member
 * rolls back every member of the set with the transaction. An item already done (an earlier
 * close, or another run's) only gains attribution, once: no member is closed twice.
 */
async function writeMembers(
  trx: Transaction<Database>,
  ctx: SettlementContext,
  facts: Awaited<ReturnType<typeof readDoneGateFacts>>,
): Promise<{ closed: string[]; attributed: string[] }> {
  // Re-read the members under lock, in item order: their prerequisites committed above.
  const ids = ctx.members.map((m) => m.item.item_id);
  const locked = new Map((await lockItemStates(trx, ids)).map((r) => [r.item_id, r]));
  const writing: ItemRow[] = [];
  const blocked: BlockedMember[] = [];
  for (const m of ctx.members) {
    const now = locked.get(m.item.item_id)!;
    const item = { ...m.item, status: now.status, delivery_evidence: now.delivery_evidence };
    // Progress members stay open; a supplemental member (no authority) only gains attribution once done.
    if (!m.required && (m.delivery_intent !== 'final' || item.status !== 'done')) continue;
    const gate = facts.get(item.item_id);
    const prepared =
      item.delivery_evidence.rung?.run === ctx.run.run_id && item.delivery_evidence.preflight?.run === ctx.run.run_id;
    const reasons = item.status === 'done' || !gate ? [] : doneGateReasons({ ...gate, prepared });
    if (reasons.length) blocked.push({ item: item.item, reasons });
    else writing.push(item);
  }
  if (blocked.length) {
    const held = ctx.members.map((m) => m.item.item).filter((i) => !blocked.some((b) => b.item === i));
    throw settlementBlocked(ctx.run.run_id, blocked, held);
  }
  const written = await writeItemsDone(trx, writing, ctx.closing);
  const closed = written.filter((w) => w.changed);
  await markMembersClosed(
    trx,
    ctx.run.run_id,
    writing.map((i) => i.item_id),
  );
  const projectOf = new Map(writing.map((i) => [i.item, i.project_id]));
  await recordEvents(
    trx,
    closed.map((w) => ({
      event_type: 'ItemDone',
      project_id: projectOf.get(w.item)!,
      session_id: null,
      payload: {
        item: w.item,
        run_id: ctx.run.run_id,
        released_claims: w.released_claims.map((c) => c.claim_id),
      },
    })),
  );
  return { closed: closed.map((w) => w.item), attributed: written.filter((w) => !w.changed).map((w) => w.item) };
}

/** The last refusal stays readable on the run (get, watch) until a commit clears it. */
async function recordBlocked(db: Executor, runId: string, err: YokeError): Promise<YokeError> {
  await recordSettlementBlocked(db, runId, { ...err.toJSON(), at: new Date().toISOString() });
  return err;
}
