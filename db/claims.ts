import { sql, type RawBuilder } from 'kysely';
import type { ClaimRow, ClaimScope } from './database';
import type { Executor } from './pool';
import type { TargetKind } from '../domain/claimKinds';
import { STICKY_KINDS } from '../domain/claimKinds';
import { unitPredicate } from './claimUnits';
import { compiledOnce, type CompiledStatement } from './compiledOnce';

/** A claim as every reader shows it: the row plus the names operators type. */
export interface ClaimView {
  claim_id: number;
  key: string | null;
  target_kind: TargetKind;
  scope: ClaimScope;
  project_id: number | null;
  project: string | null;
  item_id: number | null;
  item: string | null;
  session_id: string;
  actor_id: string;
  claimed_at: string;
  heartbeat_at: string;
  released_at: string | null;
  release_reason: string | null;
  released_by_session_id: string | null;
  released_by_actor_id: string | null;
  /** W7: set while this row is a reserved waiting-line turn not yet consumed. */
  reserved_until: string | null;
  sticky: boolean;
}

export interface ClaimFilter {
  claimIds?: number[];
  key?: string;
  projectId?: number;
  sessionId?: string;
  kinds?: readonly TargetKind[];
  activeOnly?: boolean;
}

/** A view row as the driver gives it: instants as Dates from columns, as ISO strings from json. */
type ViewRow = Omit<ClaimView, 'claimed_at' | 'heartbeat_at' | 'released_at' | 'reserved_until' | 'sticky'> & {
  claimed_at: Date | string;
  heartbeat_at: Date | string;
  released_at: Date | string | null;
  reserved_until: Date | string | null;
};

/**
 * An instant of a view row in the view's form (toISOString's). A json instant carries
 * microseconds and the session's offset ("2026-12-01T07:08:00.123456+00:00", no fraction when
 * it is zero): one in UTC is cut to milliseconds as text, as Date would, without parsing it.
 */
function instant(at: Date | string): string {
  if (typeof at !== 'string' || !at.endsWith('+00:00') || at[10] !== 'T' || at[19] !== (at.length > 25 ? '.' : '+'))
    return new Date(at).toISOString();
  return `${at.slice(0, 19)}.${`${at.slice(20, at.length - 6)}000`.slice(0, 3)}Z`;
}

/**
 * The claim view over a row source: the table itself, or the rows a data-modifying CTE just
 * wrote (which the rest of its statement cannot see in the table), so a write and its view
 * are one round trip.
 */
function viewOf(source: RawBuilder<unknown>, extra: RawBuilder<unknown> = sql``) {
  return sql<ViewRow>`
    SELECT c.claim_id, c.key, c.target_kind, c.scope, c.project_id, p.name AS project, c.item_id,
           ip.item_prefix || '-' || i.number AS item, c.session_id, s.actor_id, c.claimed_at, c.heartbeat_at,
           c.released_at, c.release_reason, c.released_by_session_id, c.released_by_actor_id, c.reserved_until ${extra}
      FROM ${source} c
      JOIN sessions s ON s.session_id = c.session_id
      LEFT JOIN backlog_items i ON i.item_id = c.item_id
      LEFT JOIN projects ip ON ip.project_id = i.project_id
      LEFT JOIN projects p ON p.project_id = c.project_id`;
}

/**
 * The claim view of the one row `c` a hot statement answers with, as one json value, its names
 * looked up by key (`actor` gives the holder's actor; `extra` adds fields): for a single row,
 * cheaper than viewOf's joins, which the planner may answer by hashing a whole table. One json
 * column instead of the view's 17 (issue 16): node-postgres describes and decodes every column
 * of every row it receives, which cost the client about 2 µs a column per statement (its
 * timestamp parser most), where JSON.parse reads the one value natively.
 */
function rowViewJson(actor: RawBuilder<unknown>, extra: RawBuilder<unknown> = sql``) {
  return sql`json_build_object(
    'claim_id', c.claim_id, 'key', c.key, 'target_kind', c.target_kind, 'scope', c.scope, 'project_id', c.project_id,
    'project', (SELECT p.name FROM projects p WHERE p.project_id = c.project_id), 'item_id', c.item_id,
    'item', (SELECT ip.item_prefix || '-' || i.number FROM backlog_items i JOIN projects ip ON ip.project_id = i.project_id
              WHERE i.item_id = c.item_id),
    'session_id', c.session_id, 'actor_id', ${actor}, 'claimed_at', c.claimed_at, 'heartbeat_at', c.heartbeat_at,
    'released_at', c.released_at, 'release_reason', c.release_reason, 'released_by_session_id', c.released_by_session_id,
    'released_by_actor_id', c.released_by_actor_id, 'reserved_until', c.reserved_until ${extra})`;
}

/**
 * The view's fields picked by name, in the view's order (what the JSON output shows): a row may
 * carry more (a take's flags, a release's wait id). One literal, not a spread of the driver's row,
 * because the acquire and the release build one on every call.
 */
function toView(r: ViewRow): ClaimView {
  return {
    claim_id: r.claim_id,
    key: r.key,
    target_kind: r.target_kind,
    scope: r.scope,
    project_id: r.project_id,
    project: r.project,
    item_id: r.item_id,
    item: r.item,
    session_id: r.session_id,
    actor_id: r.actor_id,
    claimed_at: instant(r.claimed_at),
    heartbeat_at: instant(r.heartbeat_at),
    released_at: r.released_at ? instant(r.released_at) : null,
    release_reason: r.release_reason,
    released_by_session_id: r.released_by_session_id,
    released_by_actor_id: r.released_by_actor_id,
    reserved_until: r.reserved_until ? instant(r.reserved_until) : null,
    sticky: STICKY_KINDS.includes(r.target_kind),
  };
}

export async function claimViews(db: Executor, filter: ClaimFilter): Promise<ClaimView[]> {
  const where: RawBuilder<unknown>[] = [sql`true`];
  if (filter.claimIds) where.push(sql`c.claim_id = ANY(${filter.claimIds})`);
  if (filter.key !== undefined) where.push(sql`c.key = ${filter.key}`);
  if (filter.projectId !== undefined) where.push(sql`c.project_id = ${filter.projectId}`);
  if (filter.sessionId !== undefined) where.push(sql`c.session_id = ${filter.sessionId}`);
  if (filter.kinds) where.push(sql`c.target_kind = ANY(${[...filter.kinds]})`);
  if (filter.activeOnly) where.push(sql`c.released_at IS NULL`);
  const { rows } =
    await sql<ViewRow>`${viewOf(sql`work_claims`)} WHERE ${sql.join(where, sql` AND `)} ORDER BY c.claim_id`.execute(
      db,
    );
  return rows.map(toView);
}

export async function claimView(db: Executor, claimId: number): Promise<ClaimView> {
  const [view] = await claimViews(db, { claimIds: [claimId] });
  if (!view) throw new Error(`claim ${claimId} vanished inside its own transaction`);
  return view;
}

export interface NewClaimInput {
  target_kind: TargetKind;
  scope: ClaimScope;
  key: string | null;
  project_id: number | null;
  item_id: number | null;
  session_id: string;
  /** A test-machine turn taken for a QA plan execution names it (W2). */
  qa_plan_execution_id?: number | null;
}

/** What the one-statement take saw: the claim it took, or the holder that refused it. */
export interface TakeAttempt {
  taken?: ClaimView;
  /** The live holder of the unit in the statement's snapshot, when the insert was refused. */
  holder?: ClaimView;
  /** The holder is a reserved turn past its reserved_until (W9: it passes on when looked at). */
  holderExpired: boolean;
  sessionLive: boolean;
  /** False when `machine` named a test machine that is not registered (C3). */
  machineKnown: boolean;
  /** The line guard let the insert try (always true without one). */
  lineFree: boolean;
}

/**
 * The insert met a live holder that the statement's snapshot does not show: one that
 * committed after the statement began. Taking again (a new snapshot) sees it, or the unit free.
 */
export function heldUnseen(seen: TakeAttempt): boolean {
  return seen.sessionLive && seen.machineKnown && seen.lineFree && !seen.taken && !seen.holder;
}

/**
 * The common path of an acquire, one statement (C3): the session check, the exclusivity
 * insert (the unique partial index decides) and the view of whichever claim now holds the
 * unit, the new one or the holder it collided with. No `taken` means "not taken" (session
 * not live, unit held, or the line guard said no); the caller decides from the rest whether
 * that is a plain refusal or needs its transaction. A null project_id falls back to the
 * session's project.
 *
 * `machine` (qa_admission): the machine must be registered; with `lineGuard`, only a healthy
 * machine with nobody live waiting for it is taken here; anything else goes through the
 * waiting line (W2, W7).
 *
 * C5, C3: the row it inserts is guarded (yoke_take_guard, 0062): the session and the machine
 * rows are locked against an end or a removal, and one that beat the take undoes its insert
 * and reads as a session not live or a machine not known. Run it outside a transaction: that
 * refusal is an error of the statement.
 */
export async function takeClaim(
  db: Executor,
  claim: NewClaimInput,
  opts: { machine?: string; lineGuard?: boolean } = {},
): Promise<TakeAttempt> {
  let rows: TakeRow[];
  try {
    rows = await takeStatement(claim.target_kind, !!opts.lineGuard)(db, {
      session: claim.session_id,
      machine: opts.machine ?? null,
      scope: JSON.stringify(claim.scope),
      key: claim.key,
      project: claim.project_id,
      item: claim.item_id,
      execution: claim.qa_plan_execution_id ?? null,
      unit_machine: claim.target_kind === 'qa_admission' ? String(claim.scope.test_machine) : null,
    });
  } catch (err) {
    // C5, C3: the session ended, or the machine was removed, after the statement read them:
    // its insert is undone, and the caller refuses as for what it would read now
    const { code, detail } = err as { code?: string; detail?: string };
    if (code === 'YK001' && (detail === 'session_ended' || detail === 'test_machine_unknown'))
      return {
        sessionLive: detail !== 'session_ended',
        machineKnown: detail !== 'test_machine_unknown',
        holderExpired: false,
        lineFree: true,
      };
    throw err;
  }
  const r = rows[0]!.r;
  const attempt: TakeAttempt = {
    sessionLive: r.session_live,
    machineKnown: r.machine_known,
    holderExpired: !!r.expired,
    lineFree: r.line_free,
  };
  if (r.claim_id === null) return attempt;
  const view = toView(r as ViewRow);
  return r.taken ? { ...attempt, taken: view } : { ...attempt, holder: view };
}

/** The acquire's one json column: the view's fields (null when no claim holds the unit) and the checks. */
type TakeRow = {
  r: { [K in keyof ViewRow]: ViewRow[K] | null } & {
    taken: boolean | null;
    expired: boolean | null;
    session_live: boolean;
    machine_known: boolean;
    line_free: boolean;
  };
};

const TAKE_PARAMETERS = ['session', 'machine', 'scope', 'key', 'project', 'item', 'execution', 'unit_machine'] as const;

/** The acquire's text differs only by the claim kind (its unit's index) and the line guard. */
const takeStatements = new Map<string, CompiledStatement<(typeof TAKE_PARAMETERS)[number], TakeRow>>();

function takeStatement(kind: TargetKind, lineGuard: boolean) {
  const shape = `${kind}:${lineGuard}`;
  let statement = takeStatements.get(shape);
  if (!statement) {
    statement = compiledOnce(TAKE_PARAMETERS, (p) => {
      const lineFree = lineGuard
        ? sql`NOT test_machine_unhealthy(${p.machine})
              AND NOT EXISTS (SELECT 1 FROM qa_test_machine_waits w JOIN sessions ws ON ws.session_id = w.session_id
                               WHERE w.test_machine = ${p.machine} AND w.state = 'waiting'
                                 AND ws.ended_at IS NULL AND ws.terminated_at IS NULL)`
        : sql`true`;
      const unit = unitPredicate(kind, {
        scope: () => sql`${p.scope}::jsonb`,
        testMachine: () => sql`${p.unit_machine}::text`,
        itemId: () => sql`${p.item}::integer`,
        projectId: () => sql`${p.project}::integer`,
        key: () => sql`${p.key}::text`,
      });
      return sql<TakeRow>`
        WITH s AS (SELECT session_id, project_id, actor_id FROM sessions
                    WHERE session_id = ${p.session}::text AND ended_at IS NULL AND terminated_at IS NULL),
             m AS (SELECT ${p.machine}::text IS NULL OR EXISTS (SELECT 1 FROM test_machines WHERE name = ${p.machine}::text) AS known,
                          ${lineFree} AS line_free),
             ins AS (
               INSERT INTO work_claims (target_kind, scope, key, project_id, item_id, session_id, qa_plan_execution_id)
               SELECT ${sql.lit(kind)}, ${p.scope}::jsonb, ${p.key}::text,
                      COALESCE(${p.project}::integer, s.project_id), ${p.item}::integer, s.session_id,
                      ${p.execution}::integer
                 FROM s, m
                WHERE m.known AND m.line_free
               ON CONFLICT DO NOTHING
               RETURNING *),
             -- C5, C3 (0062): only for the row inserted, the session and machine rows are locked
             -- and read again as committed now; an end or removal that beat this take refuses it
             g AS (SELECT yoke_take_guard(ins.session_id, ${p.machine}::text) AS ok FROM ins),
             c AS (SELECT ins.*, g.ok AS taken FROM ins, g
                   UNION ALL
                   SELECT work_claims.*, false FROM work_claims WHERE ${unit} AND NOT EXISTS (SELECT 1 FROM ins))
        SELECT ${rowViewJson(
          sql`CASE WHEN c.taken THEN s.actor_id ELSE (SELECT h.actor_id FROM sessions h WHERE h.session_id = c.session_id) END`,
          sql`, 'taken', c.taken, 'expired', c.reserved_until < clock_timestamp(),
                'session_live', s.session_id IS NOT NULL, 'machine_known', m.known, 'line_free', m.line_free`,
        )} AS r
          FROM m LEFT JOIN s ON true LEFT JOIN c ON true`;
    });
    takeStatements.set(shape, statement);
  }
  return statement;
}

/** A plain insert inside a transaction; undefined when the unit is held. */
export async function insertClaimRow(db: Executor, claim: NewClaimInput): Promise<ClaimRow | undefined> {
  return db
    .insertInto('work_claims')
    .values({ ...claim, scope: JSON.stringify(claim.scope) })
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
}

export async function lockClaim(db: Executor, claimId: number): Promise<ClaimRow | undefined> {
  return db.selectFrom('work_claims').selectAll().where('claim_id', '=', claimId).forUpdate().executeTakeFirst();
}

export async function heartbeatClaim(db: Executor, claimId: number): Promise<void> {
  await db
    .updateTable('work_claims')
    .set({ heartbeat_at: sql`now()` })
    .where('claim_id', '=', claimId)
    .execute();
}

/** C1: a session's heartbeat keeps every live claim bound to it alive. */
export async function heartbeatClaimsOfSession(db: Executor, sessionId: string): Promise<void> {
  await db
    .updateTable('work_claims')
    .set({ heartbeat_at: sql`now()` })
    .where('session_id', '=', sessionId)
    .where('released_at', 'is', null)
    .execute();
}

/** The live claim a session holds on its project's steering seat or on an item, if any. */
export async function liveClaimIdOfSession(
  db: Executor,
  sessionId: string,
  target: { kind: 'steering'; projectId: number } | { kind: 'item'; itemId: number },
): Promise<number | undefined> {
  const live = db
    .selectFrom('work_claims')
    .select('claim_id')
    .where('target_kind', '=', target.kind)
    .where('session_id', '=', sessionId)
    .where('released_at', 'is', null);
  const row = await (
    target.kind === 'steering'
      ? live.where('project_id', '=', target.projectId)
      : live.where('item_id', '=', target.itemId)
  ).executeTakeFirst();
  return row?.claim_id;
}

export interface ReleaseMark {
  reason: string;
  bySessionId: string | null;
  byActorId: string | null;
}

/** The mark of a release a session makes under its own actor. */
export function releasedBy(by: { session_id: string; actor_id: string }, reason: string): ReleaseMark {
  return { reason, bySessionId: by.session_id, byActorId: by.actor_id };
}

/** W7: the turn a release reserved for the oldest live waiter. */
export interface ReservedTurn {
  claim: ClaimView;
  wait_id: number;
  qa_plan_execution_id: number | null;
}

/**
 * The common release, one statement (`yoke_release_claim`, 0043_claimperf_lean_claims): the
 * holder's own release of a live claim, which for a test machine with live waiters also
 * reserves it for the oldest (W7) in the same statement, and answers with the claim views. Undefined when the full release path must decide
 * (refusals, operators, a reserved turn released, waits of ended sessions to cancel).
 */
export async function releaseServingLineView(
  db: Executor,
  claimId: number,
  actingSessionId: string,
  reason: string,
  lifetimeMs: number,
): Promise<{ released: ClaimView; reserved?: ReservedTurn } | undefined> {
  const rows = (
    await releaseStatement(db, { claim: claimId, acting: actingSessionId, reason, lifetime: lifetimeMs })
  ).map((row) => row.r);
  const released = rows.find((r) => r.claim_id === claimId);
  if (!released) return undefined;
  const turn = rows.find((r) => r.claim_id !== claimId);
  return {
    released: toView(released),
    ...(turn
      ? { reserved: { claim: toView(turn), wait_id: turn.wait_id!, qa_plan_execution_id: turn.qa_plan_execution_id } }
      : {}),
  };
}

/** Each row of the release as one json value (see rowViewJson). */
const releaseStatement = compiledOnce(
  ['claim', 'acting', 'reason', 'lifetime'],
  (p) =>
    sql<{ r: ViewRow & { wait_id: number | null; qa_plan_execution_id: number | null } }>`
      SELECT row_to_json(c) AS r
        FROM yoke_release_claim(${p.claim}::integer, ${p.acting}::text, ${p.reason}::text,
                                ${p.lifetime}::double precision) c`,
);

/**
 * W7: the waiter's acquire consumes its reserved turn, one statement (under the line's lock:
 * its live, unexpired reservation becomes its hold and its wait is granted). Undefined when
 * there is no such turn, and the full path decides.
 */
export async function consumeReservationView(
  db: Executor,
  testMachine: string,
  sessionId: string,
  executionId: number | null,
): Promise<ClaimView | undefined> {
  const [row] = await consumeStatement(db, { machine: testMachine, session: sessionId, execution: executionId });
  return row ? toView(row) : undefined;
}

const consumeStatement = compiledOnce(['machine', 'session', 'execution'], (p) =>
  viewOf(sql`yoke_consume_reservation(${p.machine}::text, ${p.session}::text, ${p.execution}::integer)`),
);

export async function releaseClaim(db: Executor, claimId: number, mark: ReleaseMark): Promise<void> {
  await db
    .updateTable('work_claims')
    .set({
      released_at: sql`clock_timestamp()`,
      release_reason: mark.reason,
      released_by_session_id: mark.bySessionId,
      released_by_actor_id: mark.byActorId,
    })
    .where('claim_id', '=', claimId)
    .where('released_at', 'is', null)
    .execute();
}

/**
 * W9: releases the live reservation claims of cancelled turns, recording why. With
 * `unconsumedOnly`, a claim whose turn was consumed (reserved_until cleared) is left alone.
 */
/** The release reason of a reserved turn cancelled unconsumed, for `cause` (W9). */
export function reservationCancelled(cause: string): string {
  return `reservation cancelled: ${cause}`;
}

export async function releaseReservationClaims(
  db: Executor,
  claimIds: number[],
  cause: string,
  opts: { unconsumedOnly: boolean },
): Promise<void> {
  if (claimIds.length === 0) return;
  await db
    .updateTable('work_claims')
    // reserved_until stays: a turn released before it was taken was never a hold (the board shows no past hold for it)
    .set({ released_at: sql`clock_timestamp()`, release_reason: reservationCancelled(cause) })
    .where('claim_id', 'in', claimIds)
    .where('released_at', 'is', null)
    .$if(opts.unconsumedOnly, (q) => q.where('reserved_until', 'is not', null))
    .execute();
}

/** A removed machine's reserved turns are released unserved, recording why. */
export async function releaseReservationsOfMachine(db: Executor, testMachine: string, cause: string): Promise<void> {
  await db
    .updateTable('work_claims')
    .set({ released_at: sql`clock_timestamp()`, release_reason: reservationCancelled(cause) })
    .where('target_kind', '=', 'qa_admission')
    .where(sql<string>`scope->>'test_machine'`, '=', testMachine)
    .where('released_at', 'is', null)
    .where('reserved_until', 'is not', null)
    .execute();
}

/** W7: a reserved turn consumed by its waiter becomes its live hold. */
export async function consumeReservationClaim(db: Executor, claimId: number): Promise<void> {
  await db
    .updateTable('work_claims')
    .set({ reserved_until: null, heartbeat_at: sql`now()` })
    .where('claim_id', '=', claimId)
    .execute();
}

/**
 * C5: releases the live non-sticky claims of sessions that have ended or been terminated.
 * Sticky kinds are skipped: only the audited operator release frees them.
 */
export async function releaseNonStickyClaimsOfEndedSessions(
  db: Executor,
  reason: string,
  sessionIds?: string[],
): Promise<number[]> {
  let q = db
    .updateTable('work_claims')
    .set({ released_at: sql`clock_timestamp()`, release_reason: reason })
    .where('released_at', 'is', null)
    .where('target_kind', 'not in', STICKY_KINDS)
    .where('session_id', 'in', (s) =>
      s
        .selectFrom('sessions')
        .select('session_id')
        .where((w) => w.or([w('ended_at', 'is not', null), w('terminated_at', 'is not', null)])),
    );
  if (sessionIds) q = q.where('session_id', 'in', sessionIds.length ? sessionIds : ['']);
  const rows = await q.returning('claim_id').execute();
  return rows.map((r) => r.claim_id).sort((a, b) => a - b);
}
