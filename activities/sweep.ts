import type { Kysely } from 'kysely';
import { sql } from 'kysely';
import type { Database } from '../db/database';
import { releaseNonStickyClaimsOfEndedSessions } from '../db/claims';

export interface SweepResult {
  terminated_sessions: string[];
  released_claim_ids: number[];
}

export function sweepActivities(deps: { db: Kysely<Database> }) {
  const { db } = deps;

  /**
   * The stale-session sweep (C5): a session whose heartbeat is older than `staleAfterMs` is
   * terminated, and the non-sticky claims of every ended or terminated session are released
   * (route qualification grants and the retired DEPLOY: holds included, C12). Sticky kinds
   * are never touched. Idempotent: a second run finds nothing left to do.
   */
  async function sweepStaleSessions(input: { staleAfterMs: number }): Promise<SweepResult> {
    return db.transaction().execute(async (trx) => {
      const stale = await trx.updateTable('sessions')
        .set({ terminated_at: sql`now()`, end_reason: 'stale_session_sweep' })
        .where('ended_at', 'is', null).where('terminated_at', 'is', null)
        .where('heartbeat_at', '<', sql<Date>`now() - make_interval(secs => ${input.staleAfterMs / 1000})`)
        .returning('session_id').execute();
      const released = await releaseNonStickyClaimsOfEndedSessions(trx, 'stale_session_sweep');
      return { terminated_sessions: stale.map((s) => s.session_id).sort(), released_claim_ids: released };
    });
  }

  return { sweepStaleSessions };
}
