import { sql, type UpdateObject } from 'kysely';
import type { Database, SettlementEffect } from './database';
import type { Executor } from './pool';

/**
 * The settlement effects ledger (deployment_run_member_effects, S3): one row per closed member
 * and effect, leased by the replay applying it and stamped applied_at once, so each effect
 * happens exactly once across replays.
 */

export interface EffectKey {
  runId: string;
  itemId: number;
  effect: SettlementEffect;
}

/** The closed members whose effects are owed, with what the effects need, in item order. */
export async function closedMembersForEffects(db: Executor, runId: string) {
  return db
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
}

/**
 * Takes the effect: a row not applied and not leased by a live replay gets a lease of
 * `leaseMs` and one more attempt. False when it is applied or leased elsewhere.
 */
export async function takeEffect(db: Executor, key: EffectKey, leaseMs: number): Promise<boolean> {
  const taken = await sql<{ attempts: number }>`
    INSERT INTO deployment_run_member_effects (run_id, item_id, effect, attempts, lease_until)
    VALUES (${key.runId}, ${key.itemId}, ${key.effect}, 1, clock_timestamp() + make_interval(secs => ${leaseMs / 1000}))
    ON CONFLICT (run_id, item_id, effect) DO UPDATE
       SET attempts = deployment_run_member_effects.attempts + 1,
           lease_until = EXCLUDED.lease_until
     WHERE deployment_run_member_effects.applied_at IS NULL
       AND (deployment_run_member_effects.lease_until IS NULL
            OR deployment_run_member_effects.lease_until < clock_timestamp())
    RETURNING attempts`.execute(db);
  return taken.rows.length > 0;
}

/** Whether the effect has been applied (by this replay earlier, or another). */
export async function effectApplied(db: Executor, key: EffectKey): Promise<boolean> {
  const row = await db
    .selectFrom('deployment_run_member_effects')
    .select('applied_at')
    .where('run_id', '=', key.runId)
    .where('item_id', '=', key.itemId)
    .where('effect', '=', key.effect)
    .executeTakeFirstOrThrow();
  return row.applied_at !== null;
}

type LedgerChange = UpdateObject<Database, 'deployment_run_member_effects'>;

async function updateLedger(db: Executor, key: EffectKey, change: LedgerChange): Promise<void> {
  await db
    .updateTable('deployment_run_member_effects')
    .set(change)
    .where('run_id', '=', key.runId)
    .where('item_id', '=', key.itemId)
    .where('effect', '=', key.effect)
    .execute();
}

/** The effect happened: applied once, its lease given back. */
export async function markEffectApplied(db: Executor, key: EffectKey, outcome: string): Promise<void> {
  await updateLedger(db, key, { applied_at: sql`clock_timestamp()`, outcome, last_error: null, lease_until: null });
}

/** The effect failed: the error is kept and the lease given back, so the next replay takes it. */
export async function markEffectFailed(db: Executor, key: EffectKey, error: string): Promise<void> {
  await updateLedger(db, key, { last_error: error.slice(0, 2000), lease_until: null });
}

/** How many of the run's effects have been applied. */
export async function appliedEffectCount(db: Executor, runId: string): Promise<number> {
  const applied = await db
    .selectFrom('deployment_run_member_effects')
    .select(({ fn }) => fn.countAll<string>().as('n'))
    .where('run_id', '=', runId)
    .where('applied_at', 'is not', null)
    .executeTakeFirstOrThrow();
  return Number(applied.n);
}

/** Every ledger row of the run with its member's label, by item and effect (the run view). */
export async function effectsOf(db: Executor, runId: string) {
  return db
    .selectFrom('deployment_run_member_effects as e')
    .innerJoin('backlog_items as i', 'i.item_id', 'e.item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select(['e.effect', 'e.applied_at', 'e.outcome', 'e.last_error'])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'))
    .where('e.run_id', '=', runId)
    .orderBy('e.item_id')
    .orderBy('e.effect')
    .execute();
}

/**
 * The live sessions whose claims on the item this run's close released (`delivered by run R`)
 * and that now hold no claim at all: the holder_session_end effect ends them. A session that
 * drives another live run is not left empty: it still has that run to finish, so it is kept.
 */
export async function holderSessionsLeftEmpty(db: Executor, runId: string, itemId: number): Promise<string[]> {
  const rows = await db
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
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('deployment_runs as r')
            .select('r.run_id')
            .whereRef('r.driver_session_id', '=', 'c.session_id')
            .where('r.run_id', '<>', runId)
            .where('r.status', 'in', ['created', 'executing']),
        ),
      ),
    )
    .orderBy('c.session_id')
    .execute();
  return rows.map((r) => r.session_id);
}
