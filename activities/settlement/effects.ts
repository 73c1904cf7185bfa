import { rm } from 'node:fs/promises';
import { sql, type Kysely } from 'kysely';
import type { Database, SettlementEffect } from '../../db/database';
import type { TrackerConfig } from '../../domain/projectDefinition';
import { sessionActivities } from '../sessions';
import type { TrackerFactory } from './tracker';

export const SETTLEMENT_EFFECTS: readonly SettlementEffect[] = ['tracker_sync', 'lane_cleanup', 'holder_session_end'];

export interface EffectsOutcome {
  run_id: string;
  applied: { item: string; effect: SettlementEffect; outcome: string }[];
  failed: { item: string; effect: SettlementEffect; error: string }[];
  /** Effects not yet applied (failed, or held by a concurrent replay's lease). */
  pending: number;
}

export interface EffectsDeps {
  db: Kysely<Database>;
  tracker: TrackerFactory;
  /** How long one replay may hold an effect before another may take it over. */
  leaseMs?: number;
  /** Test seam: runs between an effect's work and its ledger row (the fault test kills here). */
  afterEffect?: (e: { item: string; effect: SettlementEffect }) => Promise<void>;
}

const DROPPED = new Set(['57P01', '57P02', '57P03', '08000', '08003', '08006', 'ECONNRESET', 'EPIPE']);

function dropped(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return (!!e?.code && DROPPED.has(e.code)) || /Connection terminated|connection .*closed/i.test(e?.message ?? '');
}

/** S3: each database step commits on its own short connection, reopened once if it drops. */
async function onShortConnection<T>(db: Kysely<Database>, step: (conn: Kysely<Database>) => Promise<T>): Promise<T> {
  try {
    return await db.connection().execute(step);
  } catch (err) {
    if (!dropped(err)) throw err;
    return db.connection().execute(step);
  }
}

/**
 * The effects phase (S3), after the commit, over every member the run closed: issue-tracker
 * sync, terminal lane cleanup, and ending holder sessions left with no claims. No transaction
 * stays open across this work: the member read ends first, and each member's ledger steps
 * commit on their own short connection. Every effect is idempotent, and its ledger row
 * (applied_at) makes it exactly-once; a failure keeps the run settling and never reopens a
 * member, and the next replay finishes it.
 */
export async function applySettlementEffects(deps: EffectsDeps, runId: string): Promise<EffectsOutcome> {
  const { db } = deps;
  const leaseMs = deps.leaseMs ?? 60_000;
  const members = await db
    .selectFrom('deployment_run_items as m')
    .innerJoin('backlog_items as i', 'i.item_id', 'm.item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .innerJoin('deployment_runs as r', 'r.run_id', 'm.run_id')
    .select(['m.item_id', 'i.tracker_issue', 'i.lane_path', 'p.tracker', 'r.candidate_sha'])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'))
    .where('m.run_id', '=', runId)
    .where('m.closed_at', 'is not', null)
    .orderBy('m.item_id')
    .execute();
  const out: EffectsOutcome = { run_id: runId, applied: [], failed: [], pending: 0 };
  const trackers = new Map<string, ReturnType<TrackerFactory>>();
  const trackerFor = (config: TrackerConfig | null) => {
    const key = JSON.stringify(config);
    if (!trackers.has(key)) trackers.set(key, deps.tracker(config));
    return trackers.get(key)!;
  };

  for (const m of members) {
    for (const effect of SETTLEMENT_EFFECTS) {
      // Take the effect: a row not applied and not leased by a live replay.
      const taken = await onShortConnection(db, (conn) =>
        sql<{ attempts: number }>`
          INSERT INTO deployment_run_member_effects (run_id, item_id, effect, attempts, lease_until)
          VALUES (${runId}, ${m.item_id}, ${effect}, 1, clock_timestamp() + make_interval(secs => ${leaseMs / 1000}))
          ON CONFLICT (run_id, item_id, effect) DO UPDATE
             SET attempts = deployment_run_member_effects.attempts + 1,
                 lease_until = EXCLUDED.lease_until
           WHERE deployment_run_member_effects.applied_at IS NULL
             AND (deployment_run_member_effects.lease_until IS NULL
                  OR deployment_run_member_effects.lease_until < clock_timestamp())
          RETURNING attempts`.execute(conn),
      );
      if (taken.rows.length === 0) {
        const row = await onShortConnection(db, (conn) =>
          conn
            .selectFrom('deployment_run_member_effects')
            .select('applied_at')
            .where('run_id', '=', runId)
            .where('item_id', '=', m.item_id)
            .where('effect', '=', effect)
            .executeTakeFirstOrThrow(),
        );
        if (!row.applied_at) out.pending++;
        continue;
      }
      try {
        let outcome: string;
        if (effect === 'tracker_sync') {
          outcome = m.tracker_issue
            ? await (
                await trackerFor(m.tracker)
              ).markDelivered({
                issue: m.tracker_issue,
                item: m.item,
                run_id: runId,
                candidate_sha: m.candidate_sha,
              })
            : 'no tracker issue';
        } else if (effect === 'lane_cleanup') {
          outcome = m.lane_path ? await removeLane(m.lane_path) : 'no lane';
        } else {
          outcome = await endEmptyHolderSessions(db, runId, m.item_id);
        }
        await deps.afterEffect?.({ item: m.item, effect });
        await onShortConnection(db, (conn) =>
          conn
            .updateTable('deployment_run_member_effects')
            .set({ applied_at: sql`clock_timestamp()`, outcome, last_error: null, lease_until: null })
            .where('run_id', '=', runId)
            .where('item_id', '=', m.item_id)
            .where('effect', '=', effect)
            .execute(),
        );
        out.applied.push({ item: m.item, effect, outcome });
      } catch (err) {
        const error = (err as Error).message ?? String(err);
        out.failed.push({ item: m.item, effect, error });
        out.pending++;
        await onShortConnection(db, (conn) =>
          conn
            .updateTable('deployment_run_member_effects')
            .set({ last_error: error.slice(0, 2000), lease_until: null })
            .where('run_id', '=', runId)
            .where('item_id', '=', m.item_id)
            .where('effect', '=', effect)
            .execute(),
        );
      }
    }
  }
  return out;
}

/** Terminal lane cleanup: the member's checkout is removed (a missing one is already clean). */
async function removeLane(path: string): Promise<string> {
  await rm(path, { recursive: true, force: true });
  return `removed ${path}`;
}

/**
 * The sessions whose claims this run's close released end when they hold nothing else
 * (through the ordinary session end, which also cancels their waits, W9).
 */
async function endEmptyHolderSessions(db: Kysely<Database>, runId: string, itemId: number): Promise<string> {
  const holders = await onShortConnection(db, (conn) =>
    conn
      .selectFrom('work_claims as c')
      .innerJoin('sessions as s', 's.session_id', 'c.session_id')
      .select('c.session_id')
      .distinct()
      .where('c.item_id', '=', itemId)
      .where('c.release_reason', '=', `delivered by run ${runId}`)
      .where('s.ended_at', 'is', null)
      .where('s.terminated_at', 'is', null)
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom('work_claims as l')
              .select('l.claim_id')
              .whereRef('l.session_id', '=', 'c.session_id')
              .where('l.released_at', 'is', null),
          ),
        ),
      )
      .orderBy('c.session_id')
      .execute(),
  );
  const sessions = sessionActivities({ db });
  const ended: string[] = [];
  for (const h of holders) {
    const r = await sessions.endSession({
      sessionId: h.session_id,
      ifClaimFree: true,
      reason: `settled: no claims left after run ${runId}`,
    });
    if (r.ended) ended.push(h.session_id);
  }
  return ended.length ? `ended ${ended.join(', ')}` : 'no holder session left empty';
}
