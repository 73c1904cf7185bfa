import { rm } from 'node:fs/promises';
import type { Kysely } from 'kysely';
import type { Database, SettlementEffect } from '../../db/database';
import {
  closedMembersForEffects,
  effectApplied,
  holderSessionsLeftEmpty,
  markEffectApplied,
  markEffectFailed,
  takeEffect,
  type EffectKey,
} from '../../db/settlementEffects';
import type { TrackerConfig } from '../../domain/projectDefinition';
import { parseLanePath } from '../../domain/lanePath';
import { sessionActivities } from '../sessions';
import type { TrackerFactory } from './tracker';
import { refusal, type YokeError } from '../../domain/errors';

export const SETTLEMENT_EFFECTS: readonly SettlementEffect[] = ['tracker_sync', 'lane_cleanup', 'holder_session_end'];

export interface EffectsOutcome {
  run_id: string;
  applied: { item: string; effect: SettlementEffect; outcome: string }[];
  failed: { item: string; effect: SettlementEffect; error: string }[];
  /** Effects another settlement (a concurrent replay) holds the lease of and is applying now. */
  leased: { item: string; effect: SettlementEffect }[];
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
  const members = await closedMembersForEffects(db, runId);
  const out: EffectsOutcome = { run_id: runId, applied: [], failed: [], leased: [], pending: 0 };
  const trackers = new Map<string, ReturnType<TrackerFactory>>();
  const trackerFor = (config: TrackerConfig | null) => {
    const key = JSON.stringify(config);
    if (!trackers.has(key)) trackers.set(key, deps.tracker(config));
    return trackers.get(key)!;
  };

  for (const m of members) {
    for (const effect of SETTLEMENT_EFFECTS) {
      const key: EffectKey = { runId, itemId: m.item_id, effect };
      // Take the effect: a row not applied and not leased by a live replay.
      if (!(await onShortConnection(db, (conn) => takeEffect(conn, key, leaseMs)))) {
        if (!(await onShortConnection(db, (conn) => effectApplied(conn, key)))) {
          out.leased.push({ item: m.item, effect });
          out.pending++;
        }
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
        await onShortConnection(db, (conn) => markEffectApplied(conn, key, outcome));
        out.applied.push({ item: m.item, effect, outcome });
      } catch (err) {
        const error = (err as Error).message || String(err);
        out.failed.push({ item: m.item, effect, error });
        out.pending++;
        await onShortConnection(db, (conn) => markEffectFailed(conn, key, error));
      }
    }
  }
  return out;
}

/**
 * The replay's answer while the run is still settling (settlement_effects_pending). When nothing
 * failed but another settlement (a concurrent replay, the workflow) holds the effects' leases and
 * is applying them, it says so, with the recovery of waiting for it, not "fix the cause".
 */
export function effectsPendingRefusal(e: Pick<EffectsOutcome, 'run_id' | 'failed' | 'leased'>): YokeError {
  const replay = `yoke deployment-runs update ${e.run_id} status succeeded`;
  const elsewhere = !e.failed.length && e.leased.length > 0;
  const [why, recovery] = elsewhere
    ? [
        `its effects are being applied by another settlement (${e.leased.map((l) => `${l.item} ${l.effect}`).join(', ')})`,
        `wait for it: yoke deployment-runs watch ${e.run_id} (exits 0 once the run reads succeeded), or replay once it is done: ${replay}`,
      ]
    : [
        `is still settling: ${e.failed.map((f) => `${f.item} ${f.effect}: ${f.error}`).join('; ') || 'effects pending'}`,
        `fix the cause and replay: ${replay}`,
      ];
  return refusal(
    'settlement_effects_pending',
    `run ${e.run_id} committed its settlement${elsewhere ? ';' : ' but'} ${why}`,
    {
      recovery,
      details: { run_id: e.run_id, failed: e.failed, leased: e.leased },
    },
  );
}

/** Terminal lane cleanup: the member's checkout is removed (a missing one is already clean). */
async function removeLane(path: string): Promise<string> {
  // A lane recorded before lanes were checked may be relative or top-level: never removed.
  let lane: string;
  try {
    lane = parseLanePath(path);
  } catch (err) {
    return `not removed: ${(err as Error).message}`;
  }
  await rm(lane, { recursive: true, force: true });
  return `removed ${lane}`;
}

/**
 * The sessions whose claims this run's close released end when they hold nothing else
 * (through the ordinary session end, which also cancels their waits, W9).
 */
async function endEmptyHolderSessions(db: Kysely<Database>, runId: string, itemId: number): Promise<string> {
  const holders = await onShortConnection(db, (conn) => holderSessionsLeftEmpty(conn, runId, itemId));
  const sessions = sessionActivities({ db });
  const ended: string[] = [];
  for (const sessionId of holders) {
    const r = await sessions.endSession({
      sessionId,
      ifClaimFree: true,
      reason: `settled: no claims left after run ${runId}`,
    });
    if (r.ended) ended.push(sessionId);
  }
  return ended.length ? `ended ${ended.join(', ')}` : 'no holder session left empty';
}
