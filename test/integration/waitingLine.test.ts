import { sql } from 'kysely';
import type { CheckOutcome } from '../../activities/testMachines';
import type { CheckKind } from '../../domain/checkKinds';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, seedLab, services, type Services } from '../helpers/fixtures';

let t: TestDatabase;
let s: Services;
const LAB = 'QA_HOST:lab-1';

beforeEach(async () => {
  t = await createTestDatabase();
  s = services(t.db, { reservationLifetimeMs: 60_000 });
  await seedLab(s);
  for (const id of ['q1', 'q2', 'q3'])
    await s.registerSession({ sessionId: id, actorId: `actor-${id}`, project: 'web' });
});
afterEach(async () => {
  await t.drop();
});

const resume = (session: string) => `yoke coordination-claim acquire --key ${LAB} --session ${session}`;
const acquire = (sessionId: string) =>
  s.acquireCoordinationClaim({ sessionId, key: LAB, join: { resumeCommand: resume(sessionId) } });
const waitsOn = (machine = 'lab-1') => s.listWaits({ testMachine: machine, all: true });

/** Records a check the way finishCheck does, at a chosen moment, for the health rule. */
async function recordCheck(
  kind: CheckKind,
  passed: boolean,
  secondsAgo: number,
  reason = passed ? 'passed' : 'exit_status_1',
) {
  await t.db
    .insertInto('test_machine_checks')
    .values({
      test_machine: 'lab-1',
      kind,
      passed,
      reason,
      started_at: sql`now() - make_interval(secs => ${secondsAgo + 1})`,
      finished_at: sql`now() - make_interval(secs => ${secondsAgo})`,
    })
    .execute();
}

async function unhealthy(): Promise<boolean> {
  const { rows } = await sql<{ u: boolean }>`SELECT test_machine_unhealthy('lab-1') AS u`.execute(t.db);
  return rows[0]!.u;
}

const outcome = (kind: CheckKind, passed: boolean): CheckOutcome => ({
  kind,
  passed,
  reason: passed ? 'passed' : 'exit_status_1',
  exit_code: passed ? 0 : 1,
  output_digest: null,
  output_excerpt: null,
  started_at: new Date().toISOString(),
});

describe('test-machine waiting line', () => {
  test('W1 a join writes a qa_test_machine_waits row with the named columns', async () => {
    const held = await acquire('w1');
    await refusalOf(acquire('q1'));
    const row = await t.db
      .selectFrom('qa_test_machine_waits')
      .select([
        'test_machine',
        'session_id',
        'actor_id',
        'queued_at',
        'qa_plan_execution_id',
        'state',
        'claim_id',
        'resume_command',
        'rationale',
        'settled_at',
      ])
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({
      test_machine: 'lab-1',
      session_id: 'q1',
      actor_id: 'actor-q1',
      qa_plan_execution_id: null,
      state: 'waiting',
      claim_id: null,
      resume_command: resume('q1'),
      settled_at: null,
    });
    expect(row.rationale).toContain(`claim ${held.claim.claim_id}`);
    await expect(
      t.db
        .updateTable('qa_test_machine_waits')
        .set({ state: 'lost' as never })
        .execute(),
    ).rejects.toMatchObject({ code: '23514' });
  });

  test('W4 a refused acquire joins the line with the same command as its resume_command and says where it stands', async () => {
    await acquire('w1');
    const first = await refusalOf(acquire('q1'));
    const second = await refusalOf(acquire('q2'));
    expect(first.code).toBe('claim_held');
    expect(first.details.wait).toMatchObject({ position: 1, joined_now: true, resume_command: resume('q1') });
    expect(second.details.wait).toMatchObject({ position: 2 });
    expect(second.message).toContain('joined the waiting line at position 2');
    expect((await waitsOn()).map((w) => [w.session_id, w.position, w.resume_command])).toEqual([
      ['q1', 1, resume('q1')],
      ['q2', 2, resume('q2')],
    ]);
  });

  test('W5 joining again keeps the first queued_at and the place', async () => {
    await acquire('w1');
    await refusalOf(acquire('q1'));
    await refusalOf(acquire('q2'));
    const [before] = await waitsOn();
    const again = await refusalOf(acquire('q1'));
    expect(again.details.wait).toMatchObject({ position: 1, joined_now: false, queued_at: before!.queued_at });
    const after = await waitsOn();
    expect(after).toHaveLength(2);
    expect(after[0]).toMatchObject({ session_id: 'q1', queued_at: before!.queued_at, position: 1 });
  });

  test('W7 a holder release reserves the host for the oldest live waiter, skipping ended sessions; only that session takes it', async () => {
    const held = await acquire('w1');
    for (const id of ['q1', 'q2', 'q3']) await refusalOf(acquire(id));
    await s.endSession({ sessionId: 'q1' });
    const released = await s.releaseWorkClaim({
      actingSessionId: 'w1',
      claimId: held.claim.claim_id,
      reason: 'suite done',
    });
    expect(released.reservations).toEqual([expect.objectContaining({ test_machine: 'lab-1', session_id: 'q2' })]);
    // C3: in the history one holder's end comes before the next one's start, never after
    const [ended, reserved] = await Promise.all([
      t.db
        .selectFrom('work_claims')
        .select('released_at')
        .where('claim_id', '=', held.claim.claim_id)
        .executeTakeFirstOrThrow(),
      t.db
        .selectFrom('work_claims')
        .select(['claimed_at', 'heartbeat_at'])
        .where('session_id', '=', 'q2')
        .where('key', '=', LAB)
        .executeTakeFirstOrThrow(),
    ]);
    expect(reserved.claimed_at.getTime()).toBeGreaterThanOrEqual(ended.released_at!.getTime());
    // 0063: nor does a claim heartbeat before it was claimed (the turn is inserted late in its transaction)
    expect(reserved.heartbeat_at.getTime()).toBeGreaterThanOrEqual(reserved.claimed_at.getTime());

    const intruder = await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w2', key: LAB }));
    expect(intruder.code).toBe('claim_held');
    expect(intruder.message).toContain('reserved');
    expect(intruder.message).toContain('session q2');
    const third = await refusalOf(acquire('q3'));
    // q2's reserved turn stands first in line, so q3 is second
    expect(third.details.wait).toMatchObject({ position: 2, joined_now: false });

    const turn = await acquire('q2');
    expect(turn).toMatchObject({ consumed_reservation: true, claim: { session_id: 'q2', reserved_until: null } });
    expect((await waitsOn()).map((w) => [w.session_id, w.state])).toEqual([
      ['q3', 'waiting'],
      ['q1', 'cancelled'],
      ['q2', 'granted'],
    ]);
    const live = await t.db
      .selectFrom('work_claims')
      .select('session_id')
      .where('key', '=', LAB)
      .where('released_at', 'is', null)
      .execute();
    expect(live).toEqual([{ session_id: 'q2' }]);
  });

  test('W7 an operator release and a cancelled reservation also serve the line', async () => {
    const held = await acquire('w1');
    await refusalOf(acquire('q1'));
    await refusalOf(acquire('q2'));
    const byOperator = await s.operatorRelease({
      actingSessionId: 'op',
      key: LAB,
      claimId: held.claim.claim_id,
      holderSessionId: 'w1',
      reason: 'stuck',
    });
    expect(byOperator.reservations.map((r) => r.session_id)).toEqual(['q1']);
    // q1 gives its unconsumed turn back: the wait is cancelled and q2 is next (W9)
    const giveBack = await s.releaseWorkClaim({
      actingSessionId: 'q1',
      claimId: byOperator.reservations[0]!.claim_id,
      reason: 'no longer needed',
    });
    expect(giveBack.reservations.map((r) => r.session_id)).toEqual(['q2']);
    const lines = await waitsOn();
    expect(lines.find((w) => w.session_id === 'q1')).toMatchObject({
      state: 'cancelled',
      cancel_reason: 'reservation_released',
    });
    expect(lines.find((w) => w.session_id === 'q2')).toMatchObject({ state: 'reserved', position: 1 });
  });

  test('W5 W7 issue 3: positions are 1-based with the reserved turn first; a refused acquire reports the listed position', async () => {
    const held = await acquire('w1');
    await refusalOf(acquire('q1'));
    await refusalOf(acquire('q2'));
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
    const open = async () =>
      (await waitsOn()).filter((w) => w.position !== null).map((w) => [w.position, w.session_id, w.state]);
    expect(await open()).toEqual([
      [1, 'q1', 'reserved'],
      [2, 'q2', 'waiting'],
    ]);
    const third = await refusalOf(acquire('q3'));
    expect(third.details.wait).toMatchObject({ position: 3, joined_now: true });
    expect(third.message).toContain('at position 3');
    // joining again reports the same place
    expect((await refusalOf(acquire('q2'))).details.wait).toMatchObject({ position: 2, joined_now: false });
    expect(await open()).toEqual([
      [1, 'q1', 'reserved'],
      [2, 'q2', 'waiting'],
      [3, 'q3', 'waiting'],
    ]);
  });

  test('W2 health: the newer of the last verification and the last successful golden capture decides', async () => {
    expect(await unhealthy()).toBe(false); // never checked
    await recordCheck('verification', false, 50);
    expect(await unhealthy()).toBe(true);
    await recordCheck('golden_capture', false, 40); // failed captures do not count
    expect(await unhealthy()).toBe(true);
    await recordCheck('golden_capture', true, 30);
    expect(await unhealthy()).toBe(false);
    await recordCheck('verification', false, 20);
    expect(await unhealthy()).toBe(true);
    await recordCheck('verification', true, 10);
    expect(await unhealthy()).toBe(false);
  });

  test('W8 an unhealthy host is not reserved; the release ending a successful verify serves the line', async () => {
    // lab-1 is registered by seedLab (C3)
    const held = await acquire('w1');
    await refusalOf(acquire('q1'));
    await recordCheck('verification', false, 1);
    const released = await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
    expect(released.reservations).toEqual([]);
    const refused = await refusalOf(acquire('q2'));
    expect(refused.code).toBe('test_machine_unhealthy');
    expect(refused.details.wait).toMatchObject({ position: 2 });

    // a failed verify keeps it unhealthy and serves nobody
    const failing = await s.beginCheck({ testMachine: 'lab-1', sessionId: 'op' });
    expect(
      (
        await s.finishCheck({
          testMachine: 'lab-1',
          sessionId: 'op',
          claimId: failing.claim_id,
          outcome: outcome('verification', false),
          requestId: 'check-1',
        })
      ).reservations,
    ).toEqual([]);
    // a successful one serves the oldest waiter
    const passing = await s.beginCheck({ testMachine: 'lab-1', sessionId: 'op' });
    const done = await s.finishCheck({
      testMachine: 'lab-1',
      sessionId: 'op',
      claimId: passing.claim_id,
      outcome: outcome('verification', true),
      requestId: 'check-2',
    });
    expect(done.check).toMatchObject({ kind: 'verification', passed: true });
    expect(done.reservations.map((r) => r.session_id)).toEqual(['q1']);
    // finishing the same check again (a retried activity) records nothing twice
    await s.finishCheck({
      testMachine: 'lab-1',
      sessionId: 'op',
      claimId: passing.claim_id,
      outcome: outcome('verification', true),
      requestId: 'check-2',
    });
    expect(
      await t.db.selectFrom('test_machine_checks').select('check_id').where('request_id', '=', 'check-2').execute(),
    ).toHaveLength(1);
  });

  test('W9 session end cancels the wait; a reserved session ending passes the host on', async () => {
    const held = await acquire('w1');
    await refusalOf(acquire('q1'));
    await refusalOf(acquire('q2'));
    await refusalOf(acquire('q3'));
    await s.endSession({ sessionId: 'q3' });
    expect((await waitsOn()).find((w) => w.session_id === 'q3')).toMatchObject({
      state: 'cancelled',
      cancel_reason: 'session_ended',
    });
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
    const ended = await s.endSession({ sessionId: 'q1' });
    expect(ended.retained_sticky_claims).toEqual([]); // the unconsumed turn is not kept
    const lines = await waitsOn();
    expect(lines.find((w) => w.session_id === 'q1')).toMatchObject({
      state: 'cancelled',
      cancel_reason: 'session_ended',
    });
    expect(lines.find((w) => w.session_id === 'q2')).toMatchObject({ state: 'reserved' });
  });

  test('W9 a reservation not consumed within its lifetime expires and passes to the next live waiter', async () => {
    const quick = services(t.db, { reservationLifetimeMs: 200 });
    const held = await acquire('w1');
    await refusalOf(acquire('q1'));
    await refusalOf(acquire('q2'));
    const first = await quick.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
    expect(first.reservations.map((r) => r.session_id)).toEqual(['q1']);
    const until = Date.parse(first.reservations[0]!.reserved_until);
    expect(until - Date.now()).toBeLessThanOrEqual(200);
    await t.db
      .updateTable('work_claims')
      .set({ reserved_until: sql`now() - interval '1 second'` })
      .where('claim_id', '=', first.reservations[0]!.claim_id)
      .execute();
    const swept = await quick.sweepStaleSessions({ staleAfterMs: 3_600_000 });
    expect(swept.expired_reservation_claim_ids).toEqual([first.reservations[0]!.claim_id]);
    const lines = await waitsOn();
    expect(lines.find((w) => w.session_id === 'q1')).toMatchObject({
      state: 'cancelled',
      cancel_reason: 'reservation_expired',
    });
    expect(lines.find((w) => w.session_id === 'q2')).toMatchObject({ state: 'reserved' });
    // q1's late acquire finds its turn gone and joins again at the back, behind q2's reserved turn
    const late = await refusalOf(acquire('q1'));
    expect(late.details.wait).toMatchObject({ joined_now: true, position: 2 });
  });

  test('W7 fairness: 30 sessions in a known order, random release moments, grants in order, never two holders, ended sessions skipped', async () => {
    const ids = Array.from({ length: 30 }, (_, i) => `f${String(i).padStart(2, '0')}`);
    for (const id of ids) await s.registerSession({ sessionId: id, actorId: id, project: 'web' });
    let holder = await acquire('w1');
    for (const id of ids) await refusalOf(acquire(id));
    // a deterministic pseudo-random schedule: some waiters end before their turn
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const ended = new Set(ids.filter(() => rand() < 0.2));
    for (const id of ended) await s.endSession({ sessionId: id });
    const expected = ids.filter((id) => !ended.has(id));

    const granted: string[] = [];
    const others = [...expected];
    while (granted.length < expected.length) {
      await new Promise((r) => setTimeout(r, Math.floor(rand() * 5)));
      // jumpers try to take the host from outside the line while the turn is reserved
      const released = await s.releaseWorkClaim({
        actingSessionId: holder.claim.session_id,
        claimId: holder.claim.claim_id,
        reason: 'turn over',
      });
      const next = released.reservations[0]!;
      const jumper = others[others.length - 1]!;
      if (jumper !== next.session_id) expect((await refusalOf(acquire(jumper))).code).toBe('claim_held');
      const [count] = await t.db
        .selectFrom('work_claims')
        .select((e) => e.fn.countAll<string>().as('n'))
        .where('key', '=', LAB)
        .where('released_at', 'is', null)
        .execute();
      expect(Number(count!.n)).toBe(1);
      holder = await acquire(next.session_id);
      expect(holder.consumed_reservation).toBe(true);
      granted.push(next.session_id);
      others.splice(others.indexOf(next.session_id), 1);
    }
    expect(granted).toEqual(expected);
  });
});
