import type { Kysely } from 'kysely';
import type { Database, Harness, SessionRow } from '../db/database';
import { recordEvent } from '../db/events';
import {
  claimViews,
  heartbeatClaimsOfSession,
  releaseNonStickyClaimsOfEndedSessions,
  reservationCancelled,
  type ClaimView,
} from '../db/claims';
import { connectedActor } from '../db/actors';
import type { Executor } from '../db/pool';
import { requireProject } from '../db/projects';
import {
  heartbeatSessionRow,
  insertSession,
  listSessionsWithProject,
  lockSession,
  markSessionEnded,
  recordServedFacts,
  requireLiveSession,
  assertLiveSession,
  sessionWithProject,
  type SessionWithProject,
} from '../db/sessions';
import { STICKY_KINDS } from '../domain/claimKinds';
import { refusal } from '../domain/errors';
import { sessionNotRegistered } from '../domain/sessionRefusals';
import { lockLine, openWaitsOf } from '../db/waits';
import {
  DEFAULT_RESERVATION_LIFETIME_MS,
  cancelWaitsOfSession,
  noEffects,
  notifyLine,
  type LineOptions,
} from './waitingLine';

/** Locks, in name order, the waiting lines the session has an open wait in (its end cancels those waits). */
async function lockLinesOfSession(trx: Executor, sessionId: string): Promise<void> {
  const machines = [...new Set((await openWaitsOf(trx, { sessionId })).map((w) => w.test_machine))].sort();
  for (const machine of machines) await lockLine(trx, machine);
}

/** Why a session's end cancels its waits (W9), and so its unconsumed turns' release reason. */
const SESSION_ENDED = 'session_ended';

export interface SessionView {
  session_id: string;
  actor_id: string;
  project: string | null;
  project_id: number | null;
  machine_id: string | null;
  harness: Harness;
  offered_at: string;
  heartbeat_at: string;
  ended_at: string | null;
  terminated_at: string | null;
  end_reason: string | null;
  /** Issue 13: the role that registered it: its actor, or the admin who registered it for that actor. */
  registered_by: string;
  probe: boolean;
  /** U2: what was asked for at registration. */
  requested: { model: string | null; effort: string | null; window: number | null };
  /** U2: what the provider attested it served; null (unattested) until a hook settles it, never copied from the request. */
  served: { model: string | null; effort: string | null; window: number | null; attested_at: string | null };
}

export interface RegisterInput {
  sessionId: string;
  /** Issue 13: omitted, the connected role (`session_user`); another actor only when an admin connects. */
  actorId?: string;
  project?: string;
  machine?: string;
  harness?: Harness;
  probe?: boolean;
  requestedModel?: string;
  requestedEffort?: string;
  requestedWindow?: number;
}

/** One requested fact a re-registration changed (U2). */
export interface RequestedChange {
  fact: 'model' | 'effort' | 'window';
  from: string | number | null;
  to: string | number;
}

export interface RegisterResult {
  session: SessionView;
  /** false: the session was live already, and this re-registration heartbeated it. */
  registered: boolean;
  /** The requested facts a re-registration replaced, each recorded as a SessionRequestChanged event. */
  requested_changes: RequestedChange[];
}

/** The requested facts a re-registration names with another value than the recorded one. */
function requestedChanges(existing: SessionRow, input: RegisterInput): RequestedChange[] {
  const named: [RequestedChange['fact'], string | number | null, string | number | undefined][] = [
    ['model', existing.requested_model, input.requestedModel],
    ['effort', existing.requested_effort, input.requestedEffort],
    ['window', existing.requested_window, input.requestedWindow],
  ];
  return named.flatMap(([fact, from, to]) => (to === undefined || to === from ? [] : [{ fact, from, to }]));
}

/**
 * What a session is (its project, machine and harness) is recorded once: a re-registration may
 * fill in one it left out (or name the same), never replace it. Moving a live session would
 * move its usage to another machine's card, change who may read it (U13), or read its
 * transcripts as another harness's. Refused as session_identity_conflict, nothing written.
 */
function refuseIdentityChange(
  sessionId: string,
  existing: SessionRow,
  named: { project?: { id: number; name: string }; machine?: string; harness?: Harness },
): void {
  const changes: [string, string | number | null, string | number | undefined, string | undefined][] = [
    ['project', existing.project_id, named.project?.id, named.project?.name],
    ['machine', existing.machine_id, named.machine, named.machine],
    // `other` is what a registration without --harness records: naming the harness fills it in
    ['harness', existing.harness === 'other' ? null : existing.harness, named.harness, named.harness],
  ];
  for (const [fact, recorded, wanted, shown] of changes) {
    if (recorded === null || wanted === undefined || wanted === recorded) continue;
    throw refusal(
      'session_identity_conflict',
      `session ${sessionId} is registered with another ${fact}; a live session's ${fact} is not changed by registering it again (--${fact} ${shown})`,
      {
        recovery: `register it again without --${fact} (or with the recorded one: yoke sessions show ${sessionId}), or use a new session id`,
        details: { session_id: sessionId, fact, named: shown },
      },
    );
  }
}

export interface EndResult {
  session: SessionView;
  ended: boolean;
  /** Non-sticky claims this end released. */
  released_claims: ClaimView[];
  /** C5: sticky claims (migration, QA host) survive the session's end. */
  retained_sticky_claims: ClaimView[];
  /** Live non-sticky claims that kept an `--if-claim-free` end from happening. */
  blocking_claims: ClaimView[];
  warnings: string[];
}

export function sessionActivities(deps: { db: Kysely<Database>; line?: Partial<LineOptions> }) {
  const { db } = deps;
  const lifetimeMs = deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;

  async function sessionView(sessionId: string, executor: Executor = db): Promise<SessionView> {
    return toView(await sessionWithProject(executor, sessionId));
  }

  async function registerSession(request: RegisterInput): Promise<RegisterResult> {
    const input = { ...request, actorId: request.actorId ?? (await connectedActor(db)).actor };
    const project = input.project ? await requireProject(db, input.project) : undefined;
    const inserted = await insertSession(db, {
      session_id: input.sessionId,
      actor_id: input.actorId,
      project_id: project?.project_id ?? null,
      machine_id: input.machine ?? null,
      harness: input.harness ?? 'other',
      probe: input.probe ?? false,
      requested_model: input.requestedModel ?? null,
      requested_effort: input.requestedEffort ?? null,
      requested_window: input.requestedWindow ?? null,
    });
    if (inserted) return { session: await sessionView(input.sessionId), registered: true, requested_changes: [] };
    // Registering again is a heartbeat with the same identity; a different actor is a conflict.
    return db.transaction().execute(async (trx) => {
      const existing = await lockSession(trx, input.sessionId);
      assertLiveSession(input.sessionId, existing);
      if (existing.actor_id !== input.actorId) {
        throw refusal(
          'session_actor_conflict',
          `session ${input.sessionId} is registered to actor ${existing.actor_id}, not ${input.actorId}`,
          {
            recovery: 'use a new session id for the other actor',
            details: { session_id: input.sessionId, actor_id: existing.actor_id },
          },
        );
      }
      refuseIdentityChange(input.sessionId, existing, {
        project: project ? { id: project.project_id, name: input.project! } : undefined,
        machine: input.machine,
        harness: input.harness,
      });
      // U2: requested facts are the registration's own; a re-registration naming another request
      // (a harness resumed under another model, say) replaces it, and the change is recorded,
      // never silent. Served facts are untouched: only the provider attests those.
      const requested_changes = requestedChanges(existing, input);
      await heartbeatSessionRow(trx, input.sessionId, {
        project_id: project?.project_id ?? existing.project_id,
        machine_id: input.machine ?? existing.machine_id,
        harness: input.harness ?? existing.harness,
        // U13: --probe on a re-registration marks the session a probe (it was dropped silently)
        probe: input.probe || existing.probe,
        requested_model: input.requestedModel ?? existing.requested_model,
        requested_effort: input.requestedEffort ?? existing.requested_effort,
        requested_window: input.requestedWindow ?? existing.requested_window,
      });
      if (requested_changes.length > 0)
        await recordEvent(trx, {
          event_type: 'SessionRequestChanged',
          project_id: project?.project_id ?? existing.project_id,
          session_id: input.sessionId,
          payload: { session_id: input.sessionId, changes: requested_changes },
        });
      return { session: await sessionView(input.sessionId, trx), registered: false, requested_changes };
    });
  }

  /** Refuses an unregistered or ended session (session_not_registered, session_ended); reads only. */
  async function requireSession(input: { sessionId: string }): Promise<void> {
    await requireLiveSession(db, input.sessionId);
  }

  /** One heartbeat keeps the session and every claim bound to it alive (C1). */
  async function heartbeatSession(input: { sessionId: string }): Promise<SessionView> {
    await db.transaction().execute(async (trx) => {
      await requireLiveSession(trx, input.sessionId);
      await heartbeatSessionRow(trx, input.sessionId);
      await heartbeatClaimsOfSession(trx, input.sessionId);
    });
    return sessionView(input.sessionId);
  }

  /**
   * Ends a session and releases its non-sticky claims (C5: sticky kinds are skipped). Its
   * test-machine waits are cancelled and a reserved turn it had passes on (W9).
   * With `ifClaimFree`, the claim-free end check: the session ends only when it holds no live
   * non-sticky claim; sticky holds never count against it.
   */
  async function endSession(input: { sessionId: string; ifClaimFree?: boolean; reason?: string }): Promise<EndResult> {
    const effects = noEffects();
    const result = await db.transaction().execute(async (trx): Promise<EndResult> => {
      // W7 W9: the lines the session waits in are locked before its row, the order of a release
      // that serves it a turn there (line, then the turn's claim, which references the session):
      // taken after the row, the end's cancel of that wait would deadlock with such a release.
      await lockLinesOfSession(trx, input.sessionId);
      const session = await lockSession(trx, input.sessionId);
      if (!session) {
        throw sessionNotRegistered(input.sessionId);
      }
      const live = await claimViews(trx, { sessionId: input.sessionId, activeOnly: true });
      const nonSticky = live.filter((c) => !STICKY_KINDS.includes(c.target_kind));
      // C5: the sticky holds this end reports kept are read last, and read again once it has
      // committed (stillHeld, below): a release made meanwhile (by the holder's actor from
      // another session, an operator, or the session's own QA execution) is not listed. The end
      // takes no lock on them: a release locks the claim before the session's row (its
      // released_by_session_id), which the end holds from its start, so waiting for the claim
      // here would deadlock with it.
      const heldAtCommit = () => claimViews(trx, { sessionId: input.sessionId, kinds: STICKY_KINDS, activeOnly: true });
      if (session.ended_at || session.terminated_at) {
        return {
          session: await sessionView(input.sessionId, trx),
          ended: false,
          released_claims: [],
          retained_sticky_claims: await heldAtCommit(),
          blocking_claims: [],
          warnings: [],
        };
      }
      if (input.ifClaimFree && nonSticky.length > 0) {
        return {
          session: await sessionView(input.sessionId, trx),
          ended: false,
          released_claims: [],
          retained_sticky_claims: await heldAtCommit(),
          blocking_claims: nonSticky,
          warnings: [],
        };
      }
      await markSessionEnded(trx, input.sessionId, input.reason ?? 'session_end');
      const releasedIds = await releaseNonStickyClaimsOfEndedSessions(trx, 'session_end', [input.sessionId]);
      const released = await claimViews(trx, { claimIds: releasedIds });
      await cancelWaitsOfSession(trx, input.sessionId, SESSION_ENDED, lifetimeMs, effects);
      const retained = await heldAtCommit();
      // W9: a reserved turn the session never took is released by the cancelled wait (it is a
      // sticky kind, so the release above skipped it); it is a release of this end all the same.
      // Only turns count: a hold released meanwhile by someone else is not this end's release.
      const kept = new Set(retained.map((c) => c.claim_id));
      const turnIds = live.filter((c) => c.reserved_until !== null && !kept.has(c.claim_id)).map((c) => c.claim_id);
      const turns = (turnIds.length > 0 ? await claimViews(trx, { claimIds: turnIds }) : []).filter(
        (c) => c.release_reason === reservationCancelled(SESSION_ENDED),
      );
      return {
        session: await sessionView(input.sessionId, trx),
        ended: true,
        released_claims: [...released, ...turns],
        retained_sticky_claims: retained,
        blocking_claims: [],
        warnings: [],
      };
    });
    return {
      ...result,
      retained_sticky_claims: await stillHeld(result.retained_sticky_claims),
      warnings: await notifyLine(deps.line?.notifier, effects),
    };
  }

  /** C5: of the holds an end read as kept, those still held once it committed. */
  async function stillHeld(claims: ClaimView[]): Promise<ClaimView[]> {
    if (claims.length === 0) return claims;
    return claimViews(db, { claimIds: claims.map((c) => c.claim_id), activeOnly: true });
  }

  async function listSessions(input: { project?: string; activeOnly?: boolean }): Promise<SessionView[]> {
    const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
    return (await listSessionsWithProject(db, { projectId, activeOnly: input.activeOnly })).map(toView);
  }

  /**
   * U4: settles served facts from a completed served-model hook. A write that fails to reach
   * Postgres is retried (a failed-open or timed-out relay must not leave the fact unsettled).
   */
  async function attestServed(input: {
    sessionId: string;
    model: string;
    window?: number;
    effort?: string;
  }): Promise<SessionView> {
    for (let attempt = 1; ; attempt++) {
      try {
        const found = await recordServedFacts(db, input.sessionId, {
          model: input.model,
          window: input.window,
          effort: input.effort,
        });
        if (!found) {
          throw sessionNotRegistered(input.sessionId);
        }
        return sessionView(input.sessionId);
      } catch (err) {
        const transient = ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', '57P01', '40001'].includes(
          (err as { code?: string }).code ?? '',
        );
        if (!transient || attempt >= 3) throw err;
        await new Promise((r) => setTimeout(r, 200 * attempt));
      }
    }
  }

  return { registerSession, requireSession, heartbeatSession, endSession, listSessions, attestServed };
}

function iso(d: Date | null): string | null {
  return d ? d.toISOString() : null;
}

function toView(r: SessionWithProject): SessionView {
  return {
    session_id: r.session_id,
    actor_id: r.actor_id,
    project: r.project,
    project_id: r.project_id,
    machine_id: r.machine_id,
    harness: r.harness,
    offered_at: r.offered_at.toISOString(),
    heartbeat_at: r.heartbeat_at.toISOString(),
    ended_at: iso(r.ended_at),
    terminated_at: iso(r.terminated_at),
    end_reason: r.end_reason,
    registered_by: r.registered_by,
    probe: r.probe,
    requested: { model: r.requested_model, effort: r.requested_effort, window: r.requested_window },
    served: {
      model: r.served_model,
      effort: r.served_effort,
      window: r.served_window,
      attested_at: iso(r.served_attested_at),
    },
  };
}
