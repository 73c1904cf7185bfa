import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { recordEvent } from '../../db/events';
import { itemsById } from '../../db/items';
import { memberStates } from '../../db/runMembers';
import { runById } from '../../db/runs';
import { openStages } from '../../db/runStages';
import { markSettling, markSucceeded } from '../../db/settlement';
import { appliedEffectCount } from '../../db/settlementEffects';
import type { ErrorBody } from '../../domain/errors';
import { refusal, usageError, YokeError } from '../../domain/errors';
import { requireLiveSession } from '../../db/sessions';
import { assertDriver, lockRun, terminalRefusal } from '../runs/execution';
import { DEFAULT_DRIVER_FRESH_MS } from '../../domain/timeouts';
import { commitSettlement, settlementBlocked, type CommitOutcome } from './commit';
import { applySettlementEffects, SETTLEMENT_EFFECTS, type EffectsDeps, type EffectsOutcome } from './effects';
import { settlementContext } from './members';
import type { SettlementEnds } from './supersede';
import { defaultTrackerFactory, type TrackerFactory } from './tracker';
import { abortLiveExecutionsOfRun, noQaEffects, notifyQaOfSettlement } from '../qa/ending';
import { DEFAULT_RESERVATION_LIFETIME_MS, inLineTransaction } from '../waitingLine';

export interface SettlementDeps extends SettlementEnds {
  db: Kysely<Database>;
  driverFreshMs?: number;
  tracker?: TrackerFactory;
  effectLeaseMs?: number;
  afterEffect?: EffectsDeps['afterEffect'];
}

export interface FinishOutcome {
  run_id: string;
  status: string;
  /** Still settling: effects not yet applied. */
  effects_pending: number;
}

/**
 * Settlement (S1-S3, S5, S6): the run workflow's end, and the explicit replay
 * (`deployment-runs update RUN status succeeded`). Every step is idempotent, so the workflow,
 * a replay and a restarted worker may each run them again.
 */
export function settlementActivities(deps: SettlementDeps) {
  const { db } = deps;
  const effectsDeps: EffectsDeps = {
    db,
    tracker: deps.tracker ?? defaultTrackerFactory,
    leaseMs: deps.effectLeaseMs,
    afterEffect: deps.afterEffect,
  };

  /**
   * S1: after its last stage a run records settling_at while still executing; from then on
   * completion authority reads it as delivered.
   */
  async function beginSettling(input: { runId: string }): Promise<{ status: string; settling_at: string | null }> {
    return db.transaction().execute(async (trx) => {
      const run = await runById(trx, input.runId, { lock: true });
      if (run.status !== 'executing')
        return { status: run.status, settling_at: run.settling_at?.toISOString() ?? null };
      const open = await openStages(trx, run.run_id);
      if (open.length) {
        throw refusal(
          'run_not_at_settlement',
          `run ${run.run_id} still has stages to pass: ${open.map((s) => `${s.name} (${s.status})`).join(', ')}`,
          {
            recovery: `let them finish (yoke deployment-runs watch ${run.run_id}); settlement follows the last stage`,
            details: { run_id: run.run_id, open_stages: open },
          },
        );
      }
      const settlingAt = await markSettling(trx, run.run_id);
      if (!run.settling_at) {
        await recordEvent(trx, {
          event_type: 'DeploymentRunSettling',
          project_id: run.project_id,
          payload: { run_id: run.run_id },
        });
      }
      return { status: 'executing', settling_at: settlingAt.toISOString() };
    });
  }

  /** S2 for the workflow: a blocked commit is an answer to wait on, not a failure. */
  async function commitRunSettlement(input: {
    runId: string;
  }): Promise<{ commit: CommitOutcome | null; blocked: ErrorBody | null }> {
    try {
      return { commit: await commitSettlement(db, input.runId, deps), blocked: null };
    } catch (err) {
      if (err instanceof YokeError && err.code === 'run_settlement_blocked')
        return { commit: null, blocked: err.toJSON() };
      throw err;
    }
  }

  async function applyRunSettlementEffects(input: { runId: string }): Promise<EffectsOutcome> {
    return applySettlementEffects(effectsDeps, input.runId);
  }

  /**
   * The run reads succeeded only after its close-outs (S1) and their effects (S3); success
   * also refuses while a required member is still at its release wait (S6).
   */
  async function finishSettlement(input: { runId: string; actingSessionId?: string }): Promise<FinishOutcome> {
    const qa = noQaEffects();
    const { value } = await inLineTransaction(db, deps.line?.notifier, async (trx, effects) => {
      const run = await runById(trx, input.runId, { lock: true });
      const answer = (status: string, pending = 0) => ({ run_id: run.run_id, status, effects_pending: pending });
      if (run.status !== 'executing') return answer(run.status);
      if (!run.settlement_committed_at) {
        throw refusal('run_not_settled', `run ${run.run_id} has not committed its settlement`, {
          recovery: `yoke deployment-runs update ${run.run_id} status succeeded`,
          details: { run_id: run.run_id },
        });
      }
      const closed = (await memberStates(trx, run.run_id)).filter((m) => m.closed_at);
      const pending = closed.length * SETTLEMENT_EFFECTS.length - (await appliedEffectCount(trx, run.run_id));
      if (pending > 0) return answer('executing', pending);
      // S6: every final member this run closes must now read done.
      const ctx = await settlementContext(trx, run.run_id);
      const waiting = ctx.members.filter((m) => m.required && m.item.status !== 'done');
      if (waiting.length) {
        throw settlementBlocked(
          run.run_id,
          waiting.map((m) => ({
            item: m.item.item,
            reasons: [
              {
                code: 'delivery_not_discharged',
                message: `${m.item.item} is still ${m.item.status}, at its release wait`,
                recovery: `yoke deployment-runs update ${run.run_id} status succeeded`,
              },
            ],
          })),
          ctx.members.filter((m) => !waiting.includes(m)).map((m) => m.item.item),
        );
      }
      await abortLiveExecutionsOfRun(
        trx,
        run.run_id,
        'succeeded',
        input.actingSessionId ?? null, // the driver's replay acts under its own role, as terminalize does
        deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS,
        effects,
        qa,
      );
      await markSucceeded(trx, run.run_id);
      await recordEvent(trx, {
        event_type: 'DeploymentRunSucceeded',
        project_id: run.project_id,
        payload: {
          run_id: run.run_id,
          closed: (
            await itemsById(
              trx,
              closed.map((c) => c.item_id),
            )
          ).map((i) => i.item),
        },
      });
      return answer('succeeded');
    });
    await notifyQaOfSettlement(deps.qaNotifier, qa, input.runId);
    return value;
  }

  /** S6 for the workflow: a member still at its release wait is an answer to wait on. */
  async function finishRunSettlement(input: { runId: string }): Promise<FinishOutcome & { blocked: ErrorBody | null }> {
    try {
      return { ...(await finishSettlement(input)), blocked: null };
    } catch (err) {
      if (err instanceof YokeError && err.code === 'run_settlement_blocked')
        return { run_id: input.runId, status: 'executing', effects_pending: 0, blocked: err.toJSON() };
      throw err;
    }
  }

  /**
   * The explicit replay (S5): the whole settlement, now; a blocked commit surfaces as
   * run_settlement_blocked, failed effects keep the run settling.
   */
  async function settleNow(input: { runId: string; actingSessionId?: string }): Promise<{
    run_id: string;
    status: string;
    commit: CommitOutcome;
    effects: EffectsOutcome;
    effects_pending: number;
  }> {
    await beginSettling(input);
    const commit = await commitSettlement(db, input.runId, { ...deps, actingSessionId: input.actingSessionId });
    const effects = await applySettlementEffects(effectsDeps, input.runId);
    const finished = await finishSettlement(input);
    return { run_id: input.runId, status: finished.status, commit, effects, effects_pending: finished.effects_pending };
  }

  /**
   * `yoke deployment-runs update RUN status succeeded` (S5): the explicit replay, by the run's
   * driver (R1). A succeeded run answers the same again; no member is closed twice.
   */
  async function updateRunStatus(input: { sessionId: string; runId: string; field: string; value: string }) {
    if (input.field !== 'status' || input.value !== 'succeeded') {
      throw usageError('unsupported_run_update', `deployment-runs update supports only: status succeeded`, {
        recovery: `yoke deployment-runs update ${input.runId} status succeeded (to end a run otherwise: terminalize)`,
        details: { field: input.field, value: input.value },
      });
    }
    const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;
    const { run, session } = await db.transaction().execute(async (trx) => {
      const session = await requireLiveSession(trx, input.sessionId);
      const locked = await lockRun(trx, input.runId, freshMs);
      if (locked.status !== 'succeeded') assertDriver(locked, session.session_id, freshMs);
      return { run: locked, session };
    });
    if (run.status === 'succeeded') return { run_id: run.run_id, status: 'succeeded', replayed: true };
    if (run.status !== 'executing') throw terminalRefusal(run, 'succeed');
    const settled = await settleNow({ runId: run.run_id, actingSessionId: session.session_id });
    return { ...settled, replayed: false };
  }

  return {
    updateRunStatus,
    beginSettling,
    commitRunSettlement,
    applyRunSettlementEffects,
    finishSettlement,
    finishRunSettlement,
    settleNow,
  };
}

export type SettlementActivities = ReturnType<typeof settlementActivities>;
