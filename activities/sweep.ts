import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { releaseNonStickyClaimsOfEndedSessions } from '../db/claims';
import { terminateStaleSessions } from '../db/sessions';
import {
  DEFAULT_RESERVATION_LIFETIME_MS,
  cancelWaitsOfEndedSessions,
  expireReservations,
  noEffects,
  notifyLine,
  type LineOptions,
} from './waitingLine';

export interface SweepResult {
  terminated_sessions: string[];
  released_claim_ids: number[];
  /** Reserved turns nobody consumed in time, released and passed on (W9). */
  expired_reservation_claim_ids: number[];
}

export function sweepActivities(deps: { db: Kysely<Database>; line?: Partial<LineOptions> }) {
  const { db } = deps;
  const lifetimeMs = deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;

  /**
   * The stale-session sweep (C5): a session whose heartbeat is older than `staleAfterMs` is
   * terminated, and the non-sticky claims of every ended or terminated session are released
   * (route qualification grants and the retired DEPLOY: holds included, C12). Sticky kinds
   * are never touched. The waits of ended sessions are cancelled and reservations past their
   * lifetime expire (W9), as a backstop to the wait workflows' own timers. Idempotent: a
   * second run finds nothing left to do.
   */
  async function sweepStaleSessions(input: { staleAfterMs: number }): Promise<SweepResult> {
    const effects = noEffects();
    // C5: terminated in a transaction of its own, which locks only session rows, before the
    // release: a take through the waiting line holds the line and then waits for its session, so
    // a sweep that held sessions while it went on to the lines (cancelled waits, expired
    // reservations) could deadlock with it. A sweep stopped in between leaves terminated
    // sessions with their claims, which the next sweep's release finds (it releases the claims
    // of every ended or terminated session).
    const stale = await terminateStaleSessions(db, input.staleAfterMs, 'stale_session_sweep');
    const result = await db.transaction().execute(async (trx) => {
      const released = await releaseNonStickyClaimsOfEndedSessions(trx, 'stale_session_sweep');
      await cancelWaitsOfEndedSessions(trx, lifetimeMs, effects);
      const expired = await expireReservations(trx, lifetimeMs, effects);
      return {
        terminated_sessions: stale.sort(),
        released_claim_ids: released,
        expired_reservation_claim_ids: expired,
      };
    });
    await notifyLine(deps.line?.notifier, effects);
    return result;
  }

  return { sweepStaleSessions };
}

export type SweepActivities = ReturnType<typeof sweepActivities>;
