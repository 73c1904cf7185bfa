import { sql } from 'kysely';
import type { ClaimRow, WaitRow } from './database';
import type { Executor } from './pool';
import { advisoryXactLock } from './advisoryLock';
import { operatorKeyOf } from '../domain/operatorKeys';

/**
 * The waiting line of one test machine is serialized by a transaction-scoped advisory lock:
 * a join, a release that serves the line and a consumption never interleave on one machine.
 * Lock order everywhere: the line first, then claim rows.
 */
export async function lockLine(db: Executor, testMachine: string): Promise<void> {
  await advisoryXactLock(db, `qa_line:${testMachine}`);
}

const LIVE_SESSION = sql`s.ended_at IS NULL AND s.terminated_at IS NULL`;

/** A session's open wait on a machine; each of its QA plan executions has its own (W2). */
export async function openWaitOf(
  db: Executor,
  testMachine: string,
  sessionId: string,
  executionId: number | null = null,
): Promise<WaitRow | undefined> {
  return db
    .selectFrom('qa_test_machine_waits')
    .selectAll()
    .where('test_machine', '=', testMachine)
    .where('session_id', '=', sessionId)
    .where(sql<number>`coalesce(qa_plan_execution_id, 0)`, '=', executionId ?? 0)
    .where('state', 'in', ['waiting', 'reserved'])
    .executeTakeFirst();
}

export interface NewWait {
  test_machine: string;
  session_id: string;
  actor_id: string;
  resume_command: string;
  rationale: string;
  qa_plan_execution_id?: number | null;
  /** W6: an execution taking its aborted predecessor's place joins with that queued_at. */
  queued_at?: string;
}

/** W5: a session already in line keeps its row and so its first queued_at. */
export async function insertWait(db: Executor, wait: NewWait): Promise<{ row: WaitRow; joined: boolean }> {
  const inserted = await db
    .insertInto('qa_test_machine_waits')
    .values(wait)
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
  if (inserted) return { row: inserted, joined: true };
  return { row: (await openWaitOf(db, wait.test_machine, wait.session_id, wait.qa_plan_execution_id))!, joined: false };
}

/**
 * Who stands in a machine's line: the reserved turn (its holder is next to take the machine),
 * then live sessions still waiting. An ended session's leftover wait has no place.
 */
const IN_LINE = sql`(w.state = 'reserved' OR (w.state = 'waiting' AND ${LIVE_SESSION}))`;
/** Line order: the reserved turn first, then by queued_at (W5), the wait id breaking ties. */
const LINE_ORDER = sql`(w.state = 'waiting'), w.queued_at, w.wait_id`;

/**
 * 1-based place in the line, counting the reserved turn ahead: the same number `test-machine
 * waits` shows (waitViews), so what a refused acquire prints and what the line lists agree.
 */
export async function positionOf(db: Executor, wait: WaitRow): Promise<number> {
  const { rows } = await sql<{ ahead: number }>`
    SELECT count(*)::int AS ahead
      FROM qa_test_machine_waits w JOIN sessions s ON s.session_id = w.session_id
     WHERE w.test_machine = ${wait.test_machine} AND ${IN_LINE}
       AND (${LINE_ORDER}) < (${wait.state === 'waiting'}, ${wait.queued_at}, ${wait.wait_id})`.execute(db);
  return rows[0]!.ahead + 1;
}

/** W7: the oldest waiting session whose session has not ended. */
export async function oldestLiveWaiter(
  db: Executor,
  testMachine: string,
): Promise<(WaitRow & { project_id: number | null }) | undefined> {
  const { rows } = await sql<WaitRow & { project_id: number | null }>`
    SELECT w.*, s.project_id
      FROM qa_test_machine_waits w JOIN sessions s ON s.session_id = w.session_id
     WHERE w.test_machine = ${testMachine} AND w.state = 'waiting' AND ${LIVE_SESSION}
     ORDER BY w.queued_at, w.wait_id
     LIMIT 1`.execute(db);
  return rows[0];
}

export async function isUnhealthy(db: Executor, testMachine: string): Promise<boolean> {
  const { rows } = await sql<{
    unhealthy: boolean;
  }>`SELECT test_machine_unhealthy(${testMachine}) AS unhealthy`.execute(db);
  return rows[0]!.unhealthy;
}

/** Inserts the reserved turn as a live qa_admission claim of the waiter (W7). */
export async function insertReservation(
  db: Executor,
  waiter: WaitRow & { project_id: number | null },
  lifetimeMs: number,
): Promise<ClaimRow | undefined> {
  return db
    .insertInto('work_claims')
    .values({
      target_kind: 'qa_admission',
      scope: JSON.stringify({ test_machine: waiter.test_machine }),
      key: operatorKeyOf('qa_admission', { test_machine: waiter.test_machine }),
      project_id: waiter.project_id,
      session_id: waiter.session_id,
      qa_plan_execution_id: waiter.qa_plan_execution_id,
      reserved_until: sql`clock_timestamp() + make_interval(secs => ${lifetimeMs / 1000})`,
    })
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
}

export async function settleWaits(
  db: Executor,
  where: { waitIds: number[] },
  to: { state: 'reserved' | 'granted' | 'cancelled'; claimId?: number; reason?: string },
): Promise<WaitRow[]> {
  if (where.waitIds.length === 0) return [];
  return db
    .updateTable('qa_test_machine_waits')
    .set({
      state: to.state,
      ...(to.claimId !== undefined ? { claim_id: to.claimId } : {}),
      settled_at: to.state === 'reserved' ? null : sql`clock_timestamp()`,
      cancel_reason: to.reason ?? null,
    })
    .where('wait_id', 'in', where.waitIds)
    .returningAll()
    .execute();
}

/** The open (waiting or reserved) waits of one session, or of one QA plan execution (W9). */
export async function openWaitsOf(
  db: Executor,
  owner: { sessionId: string } | { executionId: number },
): Promise<WaitRow[]> {
  const query = db.selectFrom('qa_test_machine_waits').selectAll().where('state', 'in', ['waiting', 'reserved']);
  return 'sessionId' in owner
    ? query.where('session_id', '=', owner.sessionId).execute()
    : query.where('qa_plan_execution_id', '=', owner.executionId).execute();
}

/**
 * The ids of the waits still open (waiting or reserved): among given waits (a re-read under
 * the line lock), or all of one machine's.
 */
export async function openWaitIds(
  db: Executor,
  among: { waitIds: number[] } | { testMachine: string },
): Promise<number[]> {
  const query = db.selectFrom('qa_test_machine_waits').select('wait_id');
  const rows = await (
    'waitIds' in among
      ? query.where('wait_id', 'in', among.waitIds)
      : query.where('test_machine', '=', among.testMachine)
  )
    .where('state', 'in', ['waiting', 'reserved'])
    .execute();
  return rows.map((w) => w.wait_id);
}

/** A session's (or one of its executions') waits still waiting on a machine, not yet served (W2). */
export async function waitingWaitIdsOf(
  db: Executor,
  testMachine: string,
  sessionId: string,
  executionId: number | null,
): Promise<number[]> {
  const rows = await db
    .selectFrom('qa_test_machine_waits')
    .select('wait_id')
    .where('test_machine', '=', testMachine)
    .where('session_id', '=', sessionId)
    .where(sql<number>`coalesce(qa_plan_execution_id, 0)`, '=', executionId ?? 0)
    .where('state', '=', 'waiting')
    .execute();
  return rows.map((w) => w.wait_id);
}

/** The reserved wait a reservation claim serves (W7), as a list: none once it is settled. */
export async function reservedWaitsOfClaim(db: Executor, claimId: number): Promise<WaitRow[]> {
  return db
    .selectFrom('qa_test_machine_waits')
    .selectAll()
    .where('claim_id', '=', claimId)
    .where('state', '=', 'reserved')
    .execute();
}

/** W9: reserved turns whose live reservation claim is past its reserved_until, on one machine or all. */
export async function expiredReservationWaits(db: Executor, testMachine?: string): Promise<WaitRow[]> {
  return db
    .selectFrom('qa_test_machine_waits as w')
    .innerJoin('work_claims as c', 'c.claim_id', 'w.claim_id')
    .selectAll('w')
    .where('w.state', '=', 'reserved')
    .where('c.released_at', 'is', null)
    .where('c.reserved_until', '<', sql<Date>`clock_timestamp()`)
    .$if(testMachine !== undefined, (b) => b.where('w.test_machine', '=', testMachine!))
    .execute();
}

/** Open waits whose session has ended or been terminated (W9), on one machine or all. */
export async function waitsOfEndedSessions(db: Executor, testMachine?: string): Promise<WaitRow[]> {
  let q = db
    .selectFrom('qa_test_machine_waits as w')
    .innerJoin('sessions as s', 's.session_id', 'w.session_id')
    .selectAll('w')
    .where('w.state', 'in', ['waiting', 'reserved'])
    .where((e) => e.or([e('s.ended_at', 'is not', null), e('s.terminated_at', 'is not', null)]));
  if (testMachine) q = q.where('w.test_machine', '=', testMachine);
  return q.execute();
}

export interface WaitView {
  wait_id: number;
  test_machine: string;
  position: number | null;
  session_id: string;
  /** The waiting session, under the name the line's columns give it (session_id is the same). */
  session: string;
  actor_id: string;
  state: WaitRow['state'];
  queued_at: string;
  qa_plan_execution_id: number | null;
  claim_id: number | null;
  reserved_until: string | null;
  resume_command: string;
  rationale: string;
  settled_at: string | null;
  cancel_reason: string | null;
  session_live: boolean;
}

/** The line as `test-machine waits` shows it: open waits first in line order, then history. */
export async function waitViews(
  db: Executor,
  filter: { testMachine?: string; sessionId?: string; openOnly?: boolean; waitIds?: number[] },
): Promise<WaitView[]> {
  const { rows } = await sql<
    Omit<WaitView, 'queued_at' | 'settled_at' | 'reserved_until'> & {
      queued_at: Date;
      settled_at: Date | null;
      reserved_until: Date | null;
    }
  >`
    SELECT w.wait_id, w.test_machine, w.session_id, w.session_id AS session, w.actor_id, w.state, w.queued_at, w.qa_plan_execution_id, w.claim_id,
           c.reserved_until, w.resume_command, w.rationale, w.settled_at, w.cancel_reason,
           (${LIVE_SESSION}) AS session_live,
           CASE WHEN ${IN_LINE}
                THEN row_number() OVER (PARTITION BY w.test_machine, ${IN_LINE} ORDER BY ${LINE_ORDER})::int END AS position
      FROM qa_test_machine_waits w
      JOIN sessions s ON s.session_id = w.session_id
      LEFT JOIN work_claims c ON c.claim_id = w.claim_id AND w.state = 'reserved'
     WHERE (${filter.testMachine ?? null}::text IS NULL OR w.test_machine = ${filter.testMachine ?? null})
       AND (${filter.sessionId ?? null}::text IS NULL OR w.session_id = ${filter.sessionId ?? null})
       AND (${!!filter.openOnly} = false OR w.state IN ('waiting', 'reserved'))
       AND (${filter.waitIds ?? null}::int[] IS NULL OR w.wait_id = ANY(${filter.waitIds ?? null}::int[]))
     ORDER BY w.test_machine, (w.state IN ('waiting', 'reserved')) DESC, w.state = 'waiting', w.queued_at, w.wait_id`.execute(
    db,
  );
  return rows.map((r) => ({
    ...r,
    queued_at: r.queued_at.toISOString(),
    settled_at: r.settled_at ? r.settled_at.toISOString() : null,
    reserved_until: r.reserved_until ? r.reserved_until.toISOString() : null,
  }));
}

/** Everything serving the line needs to know first, in one statement. */
export async function probeLine(
  db: Executor,
  testMachine: string,
): Promise<{ held: boolean; unhealthy: boolean; waiting: boolean; ended_waiting: boolean }> {
  const { rows } = await sql<{ held: boolean; unhealthy: boolean; waiting: boolean; ended_waiting: boolean }>`
    SELECT EXISTS (SELECT 1 FROM work_claims WHERE target_kind = 'qa_admission' AND scope->>'test_machine' = ${testMachine} AND released_at IS NULL) AS held,
           test_machine_unhealthy(${testMachine}) AS unhealthy,
           EXISTS (SELECT 1 FROM qa_test_machine_waits WHERE test_machine = ${testMachine} AND state = 'waiting') AS waiting,
           EXISTS (SELECT 1 FROM qa_test_machine_waits w JOIN sessions s ON s.session_id = w.session_id
                    WHERE w.test_machine = ${testMachine} AND w.state IN ('waiting', 'reserved') AND NOT (${LIVE_SESSION})) AS ended_waiting`.execute(
    db,
  );
  return rows[0]!;
}

/** Reads a claim's test machine and, when it is one, takes that machine's line lock: one statement. */
export async function lockLineOfClaim(db: Executor, claimId: number): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended('qa_line:' || (scope->>'test_machine'), 0))
              FROM work_claims WHERE claim_id = ${claimId} AND target_kind = 'qa_admission'`.execute(db);
}

export async function waitingCount(db: Executor, testMachine: string): Promise<number> {
  const row = await db
    .selectFrom('qa_test_machine_waits')
    .select((e) => e.fn.countAll<number>().as('n'))
    .where('test_machine', '=', testMachine)
    .where('state', '=', 'waiting')
    .executeTakeFirst();
  return Number(row?.n ?? 0);
}

/** The state of the newest wait a reservation claim served, if any. */
export async function stateOfReservationWait(db: Executor, claimId: number): Promise<WaitRow['state'] | undefined> {
  const row = await db
    .selectFrom('qa_test_machine_waits')
    .select('state')
    .where('claim_id', '=', claimId)
    .orderBy('wait_id', 'desc')
    .executeTakeFirst();
  return row?.state;
}
