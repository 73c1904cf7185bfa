import { sql } from 'kysely';
import type { ClaimRow, ClaimScope } from './database';
import type { Executor } from './pool';
import type { TargetKind } from '../domain/claimKinds';
import { STICKY_KINDS } from '../domain/claimKinds';

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

export async function claimViews(db: Executor, filter: ClaimFilter): Promise<ClaimView[]> {
  let q = db
    .selectFrom('work_claims as c')
    .innerJoin('sessions as s', 's.session_id', 'c.session_id')
    .leftJoin('backlog_items as i', 'i.item_id', 'c.item_id')
    .leftJoin('projects as ip', 'ip.project_id', 'i.project_id')
    .leftJoin('projects as p', 'p.project_id', 'c.project_id')
    .select([
      'c.claim_id', 'c.key', 'c.target_kind', 'c.scope', 'c.project_id', 'p.name as project', 'c.item_id',
      sql<string | null>`ip.item_prefix || '-' || i.number`.as('item'),
      'c.session_id', 's.actor_id', 'c.claimed_at', 'c.heartbeat_at', 'c.released_at', 'c.release_reason',
      'c.released_by_session_id', 'c.released_by_actor_id',
    ])
    .orderBy('c.claim_id');
  if (filter.claimIds) q = q.where('c.claim_id', 'in', filter.claimIds.length ? filter.claimIds : [-1]);
  if (filter.key !== undefined) q = q.where('c.key', '=', filter.key);
  if (filter.projectId !== undefined) q = q.where('c.project_id', '=', filter.projectId);
  if (filter.sessionId !== undefined) q = q.where('c.session_id', '=', filter.sessionId);
  if (filter.kinds) q = q.where('c.target_kind', 'in', filter.kinds);
  if (filter.activeOnly) q = q.where('c.released_at', 'is', null);
  const rows = await q.execute();
  return rows.map((r) => ({
    ...r,
    claimed_at: r.claimed_at.toISOString(),
    heartbeat_at: r.heartbeat_at.toISOString(),
    released_at: r.released_at ? r.released_at.toISOString() : null,
    sticky: STICKY_KINDS.includes(r.target_kind),
  }));
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
}

/**
 * C3: the unique partial index decides. Returns the new row, or undefined when the unit
 * already has a live holder; never reads first.
 */
export async function insertClaim(db: Executor, claim: NewClaimInput): Promise<ClaimRow | undefined> {
  return db
    .insertInto('work_claims')
    .values({ ...claim, scope: JSON.stringify(claim.scope) })
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
}

/** The live holder of the exclusivity unit a refused insert collided with. */
export async function liveHolder(db: Executor, claim: NewClaimInput): Promise<ClaimRow | undefined> {
  let q = db.selectFrom('work_claims').selectAll().where('target_kind', '=', claim.target_kind).where('released_at', 'is', null);
  switch (claim.target_kind) {
    case 'item':
      q = q.where('item_id', '=', claim.item_id);
      break;
    case 'steering':
      q = q.where('project_id', '=', claim.project_id);
      break;
    case 'qa_admission':
      q = q.where(sql<string>`scope->>'test_machine'`, '=', String(claim.scope.test_machine));
      break;
    case 'migration_serialization':
      q = q
        .where(sql<string>`scope->>'project_id'`, '=', String(claim.scope.project_id))
        .where(sql<string>`scope->>'model'`, '=', String(claim.scope.model));
      break;
    case 'route_qualification':
      q = q
        .where(sql<string>`scope->>'project_id'`, '=', String(claim.scope.project_id))
        .where(sql<string>`scope->>'grant_key'`, '=', String(claim.scope.grant_key));
      break;
    default:
      q = q.where('key', '=', claim.key);
  }
  return q.executeTakeFirst();
}

export async function lockClaim(db: Executor, claimId: number): Promise<ClaimRow | undefined> {
  return db.selectFrom('work_claims').selectAll().where('claim_id', '=', claimId).forUpdate().executeTakeFirst();
}

export async function heartbeatClaim(db: Executor, claimId: number): Promise<void> {
  await db.updateTable('work_claims').set({ heartbeat_at: sql`now()` }).where('claim_id', '=', claimId).execute();
}

export interface ReleaseMark {
  reason: string;
  bySessionId: string | null;
  byActorId: string | null;
}

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
      s.selectFrom('sessions').select('session_id').where((w) => w.or([w('ended_at', 'is not', null), w('terminated_at', 'is not', null)])),
    );
  if (sessionIds) q = q.where('session_id', 'in', sessionIds.length ? sessionIds : ['']);
  const rows = await q.returning('claim_id').execute();
  return rows.map((r) => r.claim_id).sort((a, b) => a - b);
}
