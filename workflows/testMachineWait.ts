import { allHandlersFinished, condition, proxyActivities, setHandler } from '@temporalio/workflow';
import type { TestMachineActivities } from '../activities/testMachines';
import {
  awaitTurn,
  cancelWait,
  hostReserved,
  turnConsumed,
  waitState,
  type TurnReserved,
  type WaitInput,
  type WaitSnapshot,
  type WaitWorkflowState,
} from './definitions';

const { expireReservation } = proxyActivities<Pick<TestMachineActivities, 'expireReservation'>>({
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 10 },
});

/** Slack past reserved_until before the workflow asks Postgres, which decides expiry. */
const EXPIRY_GRACE_MS = 1_000;

/**
 * One session waiting for one test machine (W1). Postgres holds the line; this workflow
 * holds what only time can: it is woken by the release that reserved its turn (W7), tells a
 * waiting caller through the `awaitTurn` update, and when the turn is not consumed within
 * its lifetime has the reservation expire so the machine passes on (W9).
 */
export async function testMachineWait(input: WaitInput): Promise<WaitSnapshot> {
  let state: WaitWorkflowState = 'waiting';
  let turn: TurnReserved | null = null;
  let cancelReason: string | null = null;
  const snapshot = (): WaitSnapshot => ({ state, turn, cancelReason });

  // Postgres is the record: a reservation it announces is accepted whatever came before.
  setHandler(hostReserved, (t) => {
    state = 'reserved';
    turn = t;
    cancelReason = null;
  });
  setHandler(turnConsumed, () => {
    if (state === 'reserved') state = 'granted';
  });
  setHandler(cancelWait, ({ reason }) => {
    if (state === 'waiting' || state === 'reserved') {
      state = 'cancelled';
      cancelReason = reason;
    }
  });
  setHandler(awaitTurn, async () => {
    await condition(() => state !== 'waiting');
    return snapshot();
  });
  setHandler(waitState, snapshot);

  await condition(() => state !== 'waiting');
  while (state === 'reserved' && turn) {
    const current: TurnReserved = turn;
    const untilExpiry = Date.parse(current.reservedUntil) - Date.now() + EXPIRY_GRACE_MS;
    const settled = await condition(
      () => state !== 'reserved' || turn !== current,
      Math.max(untilExpiry, EXPIRY_GRACE_MS),
    );
    if (settled) continue;
    const outcome = await expireReservation({ testMachine: input.testMachine, claimId: current.claimId });
    if (turn === current && state === 'reserved') state = outcome.state;
    if (state === 'cancelled' && cancelReason === null) cancelReason = 'reservation_expired';
  }
  await condition(allHandlersFinished);
  return snapshot();
}
