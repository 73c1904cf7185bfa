import type { Kysely, Transaction } from 'kysely';
import type { ClaimRow, Database, WaitRow } from '../db/database';
import {
  consumeReservationClaim,
  lockClaim,
  releaseClaim,
  releaseReservationClaims,
  releaseReservationsOfMachine,
  type ReleaseMark,
  type ReservedTurn,
} from '../db/claims';
import type { Executor } from '../db/pool';
import type { YokeError } from '../domain/errors';
import { DEFAULT_RESERVATION_LIFETIME_MS } from '../domain/timeouts';
import {
  expiredReservationWaits,
  insertReservation,
  insertWait,
  lockLine,
  lockLineOfClaim,
  oldestLiveWaiter,
  openWaitIds,
  positionOf,
  probeLine,
  reservedWaitsOfClaim,
  settleWaits,
  openWaitsOf,
  waitingWaitIdsOf,
  waitsOfEndedSessions,
  type NewWait,
} from '../db/waits';

/**
 * The rules of the test-machine waiting line (W1, W5, W7-W9), applied inside the caller's
 * transaction with the line's lock held. What must be signalled to the wait workflows is
 * collected in LineEffects and sent after commit, so a signal never announces a turn that a
 * rollback took back.
 */
export interface Reservation {
  wait_id: number;
  test_machine: string;
  session_id: string;
  claim_id: number;
  reserved_until: string;
  /** W2: a plan execution's wait wakes that execution's workflow, not a session's wait workflow. */
  qa_plan_execution_id: number | null;
}

export interface CancelledWait {
  wait_id: number;
  test_machine: string;
  session_id: string;
  reason: string;
  qa_plan_execution_id?: number | null;
}

export interface JoinedWait {
  wait_id: number;
  test_machine: string;
  session_id: string;
  qa_plan_execution_id: number | null;
}

export interface LineEffects {
  joined: JoinedWait[];
  reservations: Reservation[];
  cancelled: CancelledWait[];
}

/** The wake-up a turn reserved by the one-statement release owes its waiter (W7). */
export function reservationOf(turn: ReservedTurn): Reservation {
  return {
    wait_id: turn.wait_id,
    test_machine: String(turn.claim.scope.test_machine),
    session_id: turn.claim.session_id,
    claim_id: turn.claim.claim_id,
    reserved_until: turn.claim.reserved_until!,
    qa_plan_execution_id: turn.qa_plan_execution_id,
  };
}

export function noEffects(): LineEffects {
  return { joined: [], reservations: [], cancelled: [] };
}

/** Wakes and stops the wait workflows; the Temporal implementation is temporal/lineSignals.ts. */
export interface LineNotifier {
  joined(w: JoinedWait): Promise<void>;
  reserved(r: Reservation): Promise<void>;
  cancelled(c: CancelledWait): Promise<void>;
}

export interface LineOptions {
  /** How long a reserved turn waits to be consumed before it passes on (W9). */
  reservationLifetimeMs: number;
  notifier?: LineNotifier;
}

export { DEFAULT_RESERVATION_LIFETIME_MS };

/** What an operation on the line runs with: the database, the reservation lifetime (W9), the wake-ups. */
export interface LineDeps {
  db: Kysely<Database>;
  lifetimeMs: number;
  notifier?: LineNotifier;
}

export function lineDeps(db: Kysely<Database>, line?: Partial<LineOptions>): LineDeps {
  return { db, lifetimeMs: line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS, notifier: line?.notifier };
}

/**
 * W7/W8: when the machine is free and healthy, reserve it for the oldest waiting session
 * whose session has not ended. Waits of ended sessions met on the way are cancelled (W9).
 */
export async function serveLine(
  trx: Executor,
  testMachine: string,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<Reservation | undefined> {
  await lockLine(trx, testMachine);
  const line = await probeLine(trx, testMachine);
  if (line.held || line.unhealthy) return undefined; // W8: an unhealthy machine waits for a successful verify
  if (line.ended_waiting) await cancelEndedSessionWaits(trx, effects, testMachine);
  if (!line.waiting) return undefined;
  const waiter = await oldestLiveWaiter(trx, testMachine);
  if (!waiter) return undefined;
  const claim = await insertReservation(trx, waiter, lifetimeMs);
  if (!claim) return undefined; // taken meanwhile by an acquirer outside the line lock
  await settleWaits(trx, { waitIds: [waiter.wait_id] }, { state: 'reserved', claimId: claim.claim_id });
  const reservation: Reservation = {
    wait_id: waiter.wait_id,
    test_machine: testMachine,
    session_id: waiter.session_id,
    claim_id: claim.claim_id,
    reserved_until: claim.reserved_until!.toISOString(),
    qa_plan_execution_id: waiter.qa_plan_execution_id,
  };
  effects.reservations.push(reservation);
  return reservation;
}

/**
 * Cancels open waits; a cancelled reserved turn releases its reservation claim and passes
 * the machine to the next live waiter (W9).
 */
async function cancelWaitRows(
  trx: Executor,
  waits: WaitRow[],
  reason: string,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<void> {
  const machines = [...new Set(waits.map((w) => w.test_machine))].sort();
  for (const machine of machines) {
    await lockLine(trx, machine);
    const ids = waits.filter((w) => w.test_machine === machine).map((w) => w.wait_id);
    // Re-read under the lock: only waits still open are cancelled.
    const open = await openWaitIds(trx, { waitIds: ids });
    const cancelled = await settleWaits(trx, { waitIds: open }, { state: 'cancelled', reason });
    for (const w of cancelled)
      effects.cancelled.push({
        wait_id: w.wait_id,
        test_machine: w.test_machine,
        session_id: w.session_id,
        reason,
        qa_plan_execution_id: w.qa_plan_execution_id,
      });
    const reservationClaims = cancelled.filter((w) => w.claim_id !== null).map((w) => w.claim_id!);
    await releaseReservationClaims(trx, reservationClaims, reason, { unconsumedOnly: true });
    await serveLine(trx, machine, lifetimeMs, effects);
  }
}

async function cancelEndedSessionWaits(trx: Executor, effects: LineEffects, testMachine?: string): Promise<void> {
  const ended = await waitsOfEndedSessions(trx, testMachine);
  if (ended.length === 0) return;
  const ids = ended.map((w) => w.wait_id);
  const cancelled = await settleWaits(trx, { waitIds: ids }, { state: 'cancelled', reason: 'session_ended' });
  for (const w of cancelled)
    effects.cancelled.push({
      wait_id: w.wait_id,
      test_machine: w.test_machine,
      session_id: w.session_id,
      reason: 'session_ended',
    });
  const reservationClaims = cancelled.filter((w) => w.claim_id !== null).map((w) => w.claim_id!);
  await releaseReservationClaims(trx, reservationClaims, 'session_ended', { unconsumedOnly: false });
}

/** A removed machine's line closes: open waits are cancelled and reserved turns released, unserved. */
export async function closeLine(
  trx: Executor,
  testMachine: string,
  reason: string,
  effects: LineEffects,
): Promise<void> {
  await lockLine(trx, testMachine);
  const open = await openWaitIds(trx, { testMachine });
  const cancelled = await settleWaits(trx, { waitIds: open }, { state: 'cancelled', reason });
  for (const w of cancelled)
    effects.cancelled.push({ wait_id: w.wait_id, test_machine: testMachine, session_id: w.session_id, reason });
  await releaseReservationsOfMachine(trx, testMachine, reason);
}

/** W9: session end cancels every wait of the session, passing any reserved turn on. */
export async function cancelWaitsOfSession(
  trx: Executor,
  sessionId: string,
  reason: string,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<void> {
  await cancelWaitRows(trx, await openWaitsOf(trx, { sessionId }), reason, lifetimeMs, effects);
}

/** W9: an execution's end cancels its waits in the same transaction, passing any reserved turn on. */
export async function cancelWaitsOfExecution(
  trx: Executor,
  executionId: number,
  reason: string,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<void> {
  await cancelWaitRows(trx, await openWaitsOf(trx, { executionId }), reason, lifetimeMs, effects);
}

/** Cancels the waits of sessions that ended (the sweep's share of W9), machine by machine. */
export async function cancelWaitsOfEndedSessions(
  trx: Executor,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<void> {
  await cancelWaitRows(trx, await waitsOfEndedSessions(trx), 'session_ended', lifetimeMs, effects);
}

/**
 * A reservation never consumed must not hold the machine forever: past its reserved_until it
 * is released, its wait cancelled, and the machine passes to the next live waiter.
 */
export async function expireReservations(
  trx: Executor,
  lifetimeMs: number,
  effects: LineEffects,
  testMachine?: string,
): Promise<number[]> {
  const expired = await expiredReservationWaits(trx, testMachine);
  await cancelWaitRows(trx, expired, 'reservation_expired', lifetimeMs, effects);
  return expired.map((w) => w.claim_id!);
}

/**
 * Everything a release of a qa_admission claim owes the line (W7, W9): a released
 * unconsumed reservation cancels its wait; then the freed machine is served.
 */
export async function afterTestMachineRelease(
  trx: Executor,
  released: ClaimRow,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<void> {
  const testMachine = String(released.scope.test_machine);
  if (released.reserved_until) {
    const [wait] = await reservedWaitsOfClaim(trx, released.claim_id);
    if (wait) {
      const [c] = await settleWaits(
        trx,
        { waitIds: [wait.wait_id] },
        { state: 'cancelled', reason: 'reservation_released' },
      );
      effects.cancelled.push({
        wait_id: c!.wait_id,
        test_machine: testMachine,
        session_id: c!.session_id,
        reason: 'reservation_released',
      });
    }
  }
  await serveLine(trx, testMachine, lifetimeMs, effects);
}

/** W4/W5: joins the line (or finds the session already in it) and reports its place. */
export async function joinLine(
  trx: Executor,
  wait: NewWait,
  effects: LineEffects,
): Promise<{ wait: WaitRow; position: number; joined: boolean }> {
  await lockLine(trx, wait.test_machine);
  const { row, joined } = await insertWait(trx, wait);
  if (joined)
    effects.joined.push({
      wait_id: row.wait_id,
      test_machine: row.test_machine,
      session_id: row.session_id,
      qa_plan_execution_id: row.qa_plan_execution_id,
    });
  return { wait: row, position: await positionOf(trx, row), joined };
}

/** The reserved session's acquire consumes its turn (W7). */
export async function consumeReservation(trx: Executor, claim: ClaimRow): Promise<void> {
  await consumeReservationClaim(trx, claim.claim_id);
  const waits = await reservedWaitsOfClaim(trx, claim.claim_id);
  await settleWaits(trx, { waitIds: waits.map((w) => w.wait_id) }, { state: 'granted' });
}

/**
 * A session that takes a free machine while in its line settles its own wait as granted; an
 * execution settles only its own, never a sibling execution's of the same session (W2).
 */
export async function grantOwnWait(
  trx: Executor,
  testMachine: string,
  sessionId: string,
  claimId: number,
  executionId: number | null = null,
): Promise<void> {
  const waits = await waitingWaitIdsOf(trx, testMachine, sessionId, executionId);
  await settleWaits(trx, { waitIds: waits }, { state: 'granted', claimId });
}

/**
 * Sends the collected effects to the wait workflows, after commit. A failed signal does not
 * undo the committed line: the reservation stands in Postgres, the waiter's `--wait` also
 * reads it there, and an unconsumed reservation still expires. Failures come back as warnings.
 */
export async function notifyLine(notifier: LineNotifier | undefined, effects: LineEffects): Promise<string[]> {
  if (!notifier) return [];
  const warnings: string[] = [];
  const attempt = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      warnings.push(`could not signal ${what}: ${(err as Error).message}`);
    }
  };
  for (const j of effects.joined)
    await attempt(`the wait of ${j.session_id} on ${j.test_machine}`, () => notifier.joined(j));
  for (const c of effects.cancelled)
    await attempt(`the cancelled wait of ${c.session_id} on ${c.test_machine}`, () => notifier.cancelled(c));
  for (const r of effects.reservations)
    await attempt(`the reservation of ${r.test_machine} for ${r.session_id}`, () => notifier.reserved(r));
  return warnings;
}

/**
 * Runs `fn` in a transaction collecting waiting-line effects, then signals them after
 * commit. A refusal returned (not thrown) by `fn` still commits its writes (a line join)
 * and is thrown afterwards.
 */
export async function inLineTransaction<T>(
  db: Kysely<Database>,
  notifier: LineNotifier | undefined,
  fn: (trx: Transaction<Database>, effects: LineEffects) => Promise<T | { refused: YokeError }>,
): Promise<{ value: T; effects: LineEffects; warnings: string[] }> {
  const effects = noEffects();
  const value = await db.transaction().execute((trx) => fn(trx, effects));
  const warnings = await notifyLine(notifier, effects);
  if (value && typeof value === 'object' && 'refused' in value) throw value.refused;
  return { value: value as T, effects, warnings };
}

/**
 * Locks a claim for release. A test machine's line is locked before its claim row, the one
 * lock order every path uses, so a release and a join or consumption never deadlock.
 */
export async function lockClaimForRelease(trx: Executor, claimId: number): Promise<ClaimRow | undefined> {
  await lockLineOfClaim(trx, claimId);
  return lockClaim(trx, claimId);
}

/** W7: every release of a test machine serves its line in the same transaction. */
export async function releaseServingLine(
  trx: Executor,
  claim: ClaimRow,
  mark: ReleaseMark,
  lifetimeMs: number,
  effects: LineEffects,
): Promise<void> {
  await releaseClaim(trx, claim.claim_id, mark);
  if (claim.target_kind === 'qa_admission') await afterTestMachineRelease(trx, claim, lifetimeMs, effects);
}
