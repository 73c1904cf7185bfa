import { DEFAULT_DRIVER_FRESH_MS } from '../../domain/timeouts';
import { drivesNothing, executeRunCommand, isTerminalRunStatus } from '../../domain/runStatuses';
import type { Kysely, Transaction } from 'kysely';
import type { Database, RunRow } from '../../db/database';
import type { Executor } from '../../db/pool';
import { recordEvent } from '../../db/events';
import { heartbeatClaimsOfSession } from '../../db/claims';
import { heartbeatSessionRow } from '../../db/sessions';
import { existingItem } from '../../db/projects';
import { driverAttachmentLive, runFlow, runById, targetedEnvironmentNames } from '../../db/runs';
import { deleteMember, recordRemoval, retractPendingRollUpsOf } from '../../db/memberChanges';
import { isMember } from '../../db/runMembers';
import {
  cancelUnfinishedStages,
  markRunTerminal,
  resetUnpassedStages,
  restoreAutomaticRetractions,
  retractUnsettledRequirements,
} from '../../db/runTerminal';
import {
  attachDriver,
  executeContext,
  executeUnlessOccupied,
  lockOrigins,
  lockRunForSession,
  type ExecuteContext,
  type OriginHolder,
} from '../../db/runExecution';
import type { UntargetedObligation } from '../../domain/admission';
import { refusal, usageError, YokeError } from '../../domain/errors';
import { failedQaRecovery } from '../../domain/qaStages';
import { qaRowsOf } from '../../db/runQa';
import { parseItemRef } from '../../domain/itemRef';
import { admitMembers, type CarriedWork, type ExplicitSelection } from './membership';
import { planFreeze } from './freeze';
import {
  assertComposition,
  composition,
  readsOwedItems,
  type DependencyWarning,
  type SupplementalWarning,
} from './composition';
import { occupyingStage, openLines } from './occupancy';
import { abortLiveExecutionsOfRun, noQaEffects, notifyQa, type QaEffects, type QaNotifier } from '../qa/ending';
import {
  DEFAULT_RESERVATION_LIFETIME_MS,
  noEffects,
  notifyLine,
  type LineEffects,
  type LineOptions,
} from '../waitingLine';

interface DrivenRun extends RunRow {
  driver_live: boolean;
}

/** Locks the run and reads whether its driver attachment is live (R1), by the database clock. */
export async function lockRun(trx: Transaction<Database>, runId: string, freshMs: number): Promise<DrivenRun> {
  return withDriverLiveness(trx, await runById(trx, runId, { lock: true }), freshMs);
}

/** R1's liveness of a locked run's driver attachment, read after the lock was granted. */
async function withDriverLiveness(trx: Transaction<Database>, run: RunRow, freshMs: number): Promise<DrivenRun> {
  return { ...run, driver_live: await driverAttachmentLive(trx, run, freshMs) };
}

/**
 * R1: a live driver attachment owns the run; any other session is refused naming it. A
 * lapsed heartbeat or an ended driver session frees the run by itself: the caller simply
 * becomes the driver.
 */
export function assertDriver(run: DrivenRun, sessionId: string, freshMs: number): void {
  if (!run.driver_session_id || run.driver_session_id === sessionId || !run.driver_live) return;
  const until = new Date(run.driver_heartbeat_at!.getTime() + freshMs).toISOString();
  throw refusal(
    'run_driven_elsewhere',
    `run ${run.run_id} is driven by session ${run.driver_session_id} (heartbeat ${run.driver_heartbeat_at!.toISOString()})`,
    {
      recovery: `let that session continue; it hands over at once by ending its session (yoke sessions end --session ${run.driver_session_id}), otherwise its attachment lapses at ${until} unless it heartbeats again`,
      details: {
        run_id: run.run_id,
        driver_session_id: run.driver_session_id,
        driver_heartbeat_at: run.driver_heartbeat_at!.toISOString(),
        lapses_at: until,
      },
    },
  );
}

export function terminalRefusal(run: RunRow, doing: string) {
  return refusal(
    `run_${run.status}`,
    `run ${run.run_id} is ${run.status}${run.terminal_reason ? ` (${run.terminal_reason})` : ''}; cannot ${doing}`,
    {
      recovery:
        run.status === 'failed'
          ? `retry it: yoke deployment-runs retry ${run.run_id}`
          : run.status === 'created'
            ? `execute it first: yoke deployment-runs execute ${run.run_id}`
            : run.status === 'executing'
              ? `it is still running: yoke deployment-runs watch ${run.run_id}`
              : 'create a new run (with a new --idempotency-key)',
      details: { run_id: run.run_id, status: run.status },
    },
  );
}

/**
 * Q4 O4: a run failed by blocking QA recorded failed fails there again on a bare retry: a refusal
 * of such a run names what moves it (record it again, then retry) instead of only "retry it".
 */
async function withFailedQaRecovery(db: Executor, run: RunRow, refused: YokeError): Promise<YokeError> {
  if (run.status !== 'failed') return refused;
  const rows = await qaRowsOf(db, run.run_id);
  const failedQa = failedQaRecovery(
    run,
    rows.map((q) => ({ ...q, retracted: q.retracted_at ? 'retracted' : null })),
  );
  return failedQa ? new YokeError(refused.kind, refused.code, refused.message, failedQa, refused.details) : refused;
}

/** T3: a taken-over run never redeploys; its work continues under its successor. */
function supersededRefusal(run: RunRow & { superseded_by_run_id: string }) {
  return refusal(
    'run_superseded',
    `run ${run.run_id} was taken over by run ${run.superseded_by_run_id}; a superseded run cannot restart`,
    {
      recovery: `continue with the successor: yoke deployment-runs get ${run.superseded_by_run_id}`,
      details: { run_id: run.run_id, superseded_by_run_id: run.superseded_by_run_id },
    },
  );
}

/**
 * Why `execute` or `retry` cannot move a run, read from its status alone (or null when it
 * can): a superseded run names its successor (T3) before its cancelled status; a cancelled run
 * never restarts; only a failed run retries; a created or executing run executes.
 */
export function walkRefusal(run: RunRow, transition: 'execute' | 'retry') {
  if (run.superseded_by_run_id) return supersededRefusal({ ...run, superseded_by_run_id: run.superseded_by_run_id });
  if (transition === 'execute')
    return run.status === 'created' || run.status === 'executing' ? null : terminalRefusal(run, 'execute');
  if (run.status === 'cancelled')
    return refusal(
      'run_cancelled',
      `run ${run.run_id} was cancelled (${run.terminal_reason}); a cancelled run cannot restart`,
      {
        recovery: 'create a new run (with a new --idempotency-key)',
        details: { run_id: run.run_id },
      },
    );
  return run.status === 'failed' ? null : terminalRefusal(run, 'retry (only failed runs retry)');
}

export interface ExecuteResult {
  run_id: string;
  project: string;
  /** Members, for the run workflow's YokeItem search attribute. */
  member_items: string[];
  status: string;
  /** The run was already executing under this driver; only its workflow needs to be running. */
  resumed: boolean;
  /** The walk the run's workflow must carry: the one owner of the cursor. */
  walk: number;
  occupancy_units: string[];
  /** The origin of the run's own target environment, for its YokeTargetOrigin search attribute. */
  target_origin: string;
  carried_work: CarriedWork | null;
  driver_session_id: string;
}

export function runExecutionActivities(deps: {
  db: Kysely<Database>;
  driverFreshMs?: number;
  line?: Partial<LineOptions>;
  qaNotifier?: QaNotifier;
}) {
  const { db } = deps;
  const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;
  const lifetimeMs = deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;

  /** Every execution and membership call: a live session, the run locked, and R1's driver check. */
  async function asDriver(trx: Transaction<Database>, input: { sessionId: string; runId: string }) {
    const { session, run } = await asLiveSession(trx, input);
    assertDriver(run, session.session_id, freshMs);
    return { session, run };
  }

  /** A live session and the run locked, in one statement, with its driver's liveness (R1). */
  async function asLiveSession(trx: Transaction<Database>, input: { sessionId: string; runId: string }) {
    const locked = await lockRunForSession(trx, input.sessionId, input.runId);
    return { session: { session_id: locked.sessionId }, run: await withDriverLiveness(trx, locked.run, freshMs) };
  }

  /**
   * `deployment-runs execute` (O1-O3, R1): in one transaction, an advisory lock per origin in
   * sorted order, the occupancy check, the composition freeze (D5), the flow pinned on the run,
   * then status executing with the caller attached as driver and a new walk.
   */
  async function executeRun(input: { sessionId: string; runId: string }): Promise<ExecuteResult> {
    return db.transaction().execute(async (trx) => {
      const locked = await lockRunForSession(trx, input.sessionId, input.runId, { context: true });
      const run = await withDriverLiveness(trx, locked.run, freshMs);
      assertDriver(run, locked.sessionId, freshMs);
      return executeLocked(trx, locked.sessionId, run, locked.context);
    });
  }

  /**
   * The execute transition on a run the caller has locked and may drive, in a fixed number of
   * statements (issue 16): the read of flow, environments and members (given when the lock's
   * statement read it), then one call for the origin locks, the occupancy check, the freeze and
   * the status change. Refusals keep their order: the run's status, target_occupied, then
   * composition's; so a refused composition, or one that must read after the locks, takes the
   * locks and the check on their own first.
   */
  async function executeLocked(
    trx: Transaction<Database>,
    sessionId: string,
    run: RunRow,
    given?: ExecuteContext,
  ): Promise<ExecuteResult> {
    const context = given ?? (await executeContext(trx, run));
    // A retried run keeps the flow it pinned at its first execute.
    const flow = run.pinned_flow ? { ...context.flow, stages: run.pinned_flow.stages } : context.flow;
    const target = context.environments.find((e) => e.environment_id === run.target_environment_id)!;
    // The units a run occupies: the origins of its target and every stage target (O1, O3).
    const names = targetedEnvironmentNames(flow, target.name);
    const targeted = context.environments.filter((e) => names.includes(e.name));
    const units = [...new Set(targeted.map((e) => e.occupancy_unit))].sort();
    const labels = {
      project: context.project,
      member_items: context.members.map((m) => m.item),
      target_origin: target.occupancy_unit,
    };
    if (run.status === 'executing') {
      await attachDriver(trx, run.run_id, sessionId);
      return {
        run_id: run.run_id,
        ...labels,
        status: run.status,
        resumed: true,
        walk: run.walk,
        occupancy_units: units,
        // as recorded at the first execute's freeze: a repeat answers what the first one did
        carried_work: run.carried_work ? { recorded: true, items: run.carried_work } : null,
        driver_session_id: sessionId,
      };
    }
    const refused = walkRefusal(run, 'execute');
    if (refused) throw refused;
    const freeze = planFreeze(context.members, context.obligations, flow.stages);
    // D9 at the executing freeze: the freeze changes no member, so it is judged on what was read.
    const judge = () =>
      composition(trx, run, flow, 'freeze', {
        members: context.members,
        obligations: context.obligations,
        target,
        defaultCompletionFlowId: context.default_completion_flow_id,
      });
    const early = readsOwedItems(flow, context.members.length, 'freeze') ? undefined : await judge();
    if (!early || early.refusals.length) {
      const holder = await lockOrigins(trx, run.run_id, units);
      if (holder) throw await occupied(trx, holder);
      assertComposition(early ?? (await judge()));
    }
    const executed = await executeUnlessOccupied(trx, {
      runId: run.run_id,
      projectId: run.project_id,
      sessionId,
      units,
      stages: flow.stages,
      selections: freeze.selections,
      rollUps: freeze.rollUps,
      rollUpPatterns: freeze.rollUpPatterns,
      carriedWork: freeze.carried.items,
      // The URLs of the environments the run targets, as they are now (stage actions read them).
      pinnedFlow: run.pinned_flow ?? {
        stages: flow.stages,
        environment_urls: Object.fromEntries(targeted.map((e) => [e.name, e.url])),
      },
    });
    if ('holder' in executed) throw await occupied(trx, executed.holder);
    return {
      run_id: run.run_id,
      ...labels,
      status: 'executing',
      resumed: false,
      walk: executed.walk,
      occupancy_units: units,
      carried_work: freeze.carried,
      driver_session_id: sessionId,
    };
  }

  /** O2: target_occupied, naming the holder and its open lines. */
  async function occupied(trx: Transaction<Database>, holder: OriginHolder) {
    const lines = await openLines(trx, holder.run_id);
    // the holder's workflow may not have begun its first stage yet: its cursor's stage, as its line says
    const stage = holder.current_stage ?? (await occupyingStage(trx, holder.run_id));
    return refusal(
      'target_occupied',
      `origin ${holder.unit} is occupied by run ${holder.run_id} (project ${holder.project}, stage ${stage ?? 'not started'}): ${lines.join('; ')}`,
      {
        recovery: `re-run the start once ${holder.run_id} finishes deploying and its QA settles (yoke deployment-runs watch ${holder.run_id}), or terminalize a holder nobody will finish: yoke deployment-runs terminalize ${holder.run_id} --disposition cancelled --reason R`,
        details: {
          origin: holder.unit,
          holder: {
            run_id: holder.run_id,
            project: holder.project,
            stage,
            open_lines: lines,
          },
        },
      },
    );
  }

  /** `deployment-runs heartbeat`: the driver keeps its attachment; after a lapse, the caller takes it. */
  async function heartbeatRun(input: { sessionId: string; runId: string }) {
    return db.transaction().execute(async (trx) => {
      const { session, run } = await asLiveSession(trx, input);
      // Attaching to a run that can never move again would name a driver of nothing.
      if (drivesNothing(run))
        throw run.superseded_by_run_id
          ? supersededRefusal({ ...run, superseded_by_run_id: run.superseded_by_run_id })
          : terminalRefusal(run, 'be driven');
      // The session that executes becomes the driver: a heartbeat only keeps an attachment
      // (or takes a lapsed one), so a run nobody has executed is not seized by one.
      if (run.status === 'created' && run.driver_session_id === null)
        throw refusal('run_not_executing', `run ${run.run_id} is created and has no driver to heartbeat`, {
          recovery: `execute it to drive it: ${executeRunCommand(run.run_id)}`,
          details: { run_id: run.run_id, status: run.status },
        });
      assertDriver(run, session.session_id, freshMs);
      const row = await attachDriver(trx, run.run_id, session.session_id);
      // C1, R1: a driver's heartbeat is its session's heartbeat too (and its claims', as
      // `sessions heartbeat` does). Without it the stale-session sweep ended a driver that
      // heartbeated only its run, and its attachment with it.
      await heartbeatSessionRow(trx, session.session_id);
      await heartbeatClaimsOfSession(trx, session.session_id);
      return {
        run_id: row.run_id,
        driver_session_id: row.driver_session_id,
        driver_heartbeat_at: row.driver_heartbeat_at!.toISOString(),
        took_over: run.driver_session_id !== null && run.driver_session_id !== session.session_id,
      };
    });
  }

  /**
   * `deployment-runs terminalize` (O4): the status, the abort of unfinished stages and the
   * automatic retraction of unsettled run requirements happen in one transaction. Passed
   * proof stays.
   */
  async function terminalizeRun(input: {
    sessionId: string;
    runId: string;
    disposition: 'cancelled' | 'failed';
    reason: string;
  }) {
    if (!input.reason.trim())
      throw usageError('reason_required', 'terminalize needs a non-empty --reason', {
        recovery: 'say why, e.g. --reason "superseded by hotfix"',
      });
    const ends = { lifetimeMs, effects: noEffects(), qa: noQaEffects() };
    const result = await db.transaction().execute(async (trx) => {
      const { session, run } = await asLiveSession(trx, input);
      if (run.status === input.disposition && run.terminal_reason === input.reason)
        return {
          run_id: run.run_id,
          status: run.status,
          retracted: [] as string[],
          aborted_executions: [] as number[],
        };
      if (isTerminalRunStatus(run.status))
        throw await withFailedQaRecovery(trx, run, terminalRefusal(run, `terminalize it as ${input.disposition}`));
      assertDriver(run, session.session_id, freshMs);
      const retracted = await markTerminal(trx, run, input.disposition, input.reason, session.session_id, ends);
      return {
        run_id: run.run_id,
        status: input.disposition,
        retracted,
        aborted_executions: ends.qa.ended.map((e) => e.execution_id),
      };
    });
    const warnings = [
      ...(await notifyLine(deps.line?.notifier, ends.effects)),
      ...(await notifyQa(deps.qaNotifier, ends.qa)),
    ];
    return { ...result, warnings };
  }

  /**
   * `deployment-runs retry` (O4): a failed run restores its automatic retractions and executes
   * again, in one transaction: a refused restart (its origins occupied meanwhile, say) leaves
   * the run failed with its retractions in place.
   */
  async function retryRun(input: { sessionId: string; runId: string }): Promise<ExecuteResult> {
    return db.transaction().execute(async (trx) => {
      const { session, run } = await asLiveSession(trx, input);
      const refused = walkRefusal(run, 'retry');
      if (refused) throw refused;
      assertDriver(run, session.session_id, freshMs);
      await restoreAutomaticRetractions(trx, run.run_id);
      await resetUnpassedStages(trx, run.run_id);
      await recordEvent(trx, {
        event_type: 'DeploymentRunRetried',
        project_id: run.project_id,
        session_id: session.session_id,
        payload: { run_id: run.run_id },
      });
      return executeLocked(trx, session.session_id, {
        ...run,
        status: 'created',
        terminal_at: null,
        terminal_reason: null,
      });
    });
  }

  /** `add-item` (D5, D6): only while the run has not settled; driver-bound (R1). */
  async function addItem(input: { sessionId: string; runId: string; item: string } & ExplicitSelection): Promise<{
    run_id: string;
    item: string;
    warnings: (UntargetedObligation | SupplementalWarning | DependencyWarning)[];
  }> {
    return db.transaction().execute(async (trx) => {
      const { session, run } = await asDriver(trx, input);
      if (run.status !== 'created' && run.status !== 'executing')
        throw await withFailedQaRecovery(trx, run, terminalRefusal(run, 'add members'));
      const item = await existingItem(trx, parseItemRef(input.item));
      if (item.project_id !== run.project_id) {
        throw refusal('item_outside_project', `item ${item.item} does not belong to run ${run.run_id}'s project`, {
          recovery: "add items of the run's own project",
          details: { item: item.item },
        });
      }
      if (await isMember(trx, run.run_id, item.item_id)) {
        throw refusal('item_already_member', `item ${item.item} is already a member of run ${run.run_id}`, {
          recovery: 'nothing to do',
          details: { run_id: run.run_id, item: item.item },
        });
      }
      const flow = await runFlow(trx, run);
      const warnings: (UntargetedObligation | SupplementalWarning | DependencyWarning)[] = await admitMembers(
        trx,
        run,
        await runFlow(trx, run),
        [{ item_id: item.item_id, item: item.item }],
        input,
      );
      // D9 refusals; D10: a supplemental member whose proof will not be credited is named; D7: so
      // is an unsatisfied dependency of the added member, which settlement would hold.
      const checked = await composition(trx, run, flow, 'add_item');
      assertComposition(checked);
      warnings.push(
        ...checked.warnings.filter(
          (w): w is SupplementalWarning | DependencyWarning =>
            (w.code === 'supplemental_proof_not_credited' || w.code === 'dependency_unsatisfied') &&
            w.item === item.item,
        ),
      );
      await recordEvent(trx, {
        event_type: 'DeploymentRunItemAdded',
        project_id: run.project_id,
        session_id: session.session_id,
        payload: { run_id: run.run_id, item: item.item },
      });
      return { run_id: run.run_id, item: item.item, warnings };
    });
  }

  /** `remove-item --reason` (D1): an audited removal; its unsettled roll-ups are retracted. */
  async function removeItem(input: { sessionId: string; runId: string; item: string; reason: string }) {
    if (!input.reason.trim())
      throw usageError('reason_required', 'remove-item needs a non-empty --reason', {
        recovery: 'say why, e.g. --reason "moved to next release"',
      });
    return db.transaction().execute(async (trx) => {
      const { session, run } = await asDriver(trx, input);
      if (run.status !== 'created' && run.status !== 'executing')
        throw await withFailedQaRecovery(trx, run, terminalRefusal(run, 'remove members'));
      const item = await existingItem(trx, parseItemRef(input.item));
      if (!(await deleteMember(trx, run.run_id, item.item_id))) {
        throw refusal('item_not_member', `item ${item.item} is not a member of run ${run.run_id}`, {
          recovery: `see the members: yoke deployment-runs get ${run.run_id} member_items`,
          details: { run_id: run.run_id, item: item.item },
        });
      }
      const row = await recordRemoval(trx, {
        run_id: run.run_id,
        item_id: item.item_id,
        reason: input.reason,
        removed_by_session_id: session.session_id,
      });
      await retractPendingRollUpsOf(trx, run.run_id, item.item);
      await recordEvent(trx, {
        event_type: 'DeploymentRunItemRemoved',
        project_id: run.project_id,
        session_id: session.session_id,
        payload: { run_id: run.run_id, item: item.item, reason: input.reason },
      });
      return {
        run_id: run.run_id,
        item: item.item,
        reason: row.reason,
        removed_at: row.removed_at.toISOString(),
        later_run_id: row.later_run_id,
      };
    });
  }

  /**
   * execute / retry before anything else is asked (issue 10): what the run's status alone
   * refuses, so a run that cannot walk is named as such even while Temporal is down. The
   * transition checks again under the run's lock.
   */
  async function assertWalkable(input: { runId: string; transition: 'execute' | 'retry' }): Promise<void> {
    const run = await runById(db, input.runId);
    const refused = walkRefusal(run, input.transition);
    if (refused) throw await withFailedQaRecovery(db, run, refused);
  }

  return { executeRun, heartbeatRun, terminalizeRun, retryRun, addItem, removeItem, assertWalkable };
}

/** What terminalizing owes the waiting line and the QA workflows after commit. */
export interface TerminalEnds {
  lifetimeMs: number;
  effects: LineEffects;
  qa: QaEffects;
}

/**
 * Terminal status, aborted stages, O4's automatic retractions and the abort of every live QA
 * plan execution (release_reason run_failed / run_cancelled), inside the caller's transaction.
 */
export async function markTerminal(
  trx: Transaction<Database>,
  run: RunRow,
  disposition: 'cancelled' | 'failed',
  reason: string,
  sessionId: string | null,
  ends: TerminalEnds,
): Promise<string[]> {
  await abortLiveExecutionsOfRun(trx, run.run_id, disposition, sessionId, ends.lifetimeMs, ends.effects, ends.qa);
  await markRunTerminal(trx, run.run_id, disposition, reason);
  await cancelUnfinishedStages(trx, run.run_id);
  const retracted = await retractUnsettledRequirements(trx, run.run_id);
  await recordEvent(trx, {
    event_type: disposition === 'failed' ? 'DeploymentRunFailed' : 'DeploymentRunCancelled',
    project_id: run.project_id,
    session_id: sessionId,
    payload: { run_id: run.run_id, reason },
  });
  return retracted;
}
