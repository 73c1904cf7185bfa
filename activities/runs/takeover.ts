import type { Kysely, Transaction } from 'kysely';
import type { Database, RunRow } from '../../db/database';
import { recordEvent } from '../../db/events';
import { setLocalTimeouts } from '../../db/localTimeouts';
import { projectById } from '../../db/projects';
import { runHasExecutions } from '../../db/qaExecutions';
import { runHasQa } from '../../db/runQa';
import { stageStatuses } from '../../db/runStages';
import type { Executor } from '../../db/pool';
import { qaStageOutstanding } from '../../db/qaOutstanding';
import { driverAttachmentLive, runById } from '../../db/runs';
import { requireLiveSession } from '../../db/sessions';
import {
  closedMemberIds,
  itemLabels,
  lockMovingExecutions,
  markSuperseded,
  moveToSuccessor,
  takeoverCandidates,
  unclosedMemberIds,
  type MoveResult,
} from '../../db/takeover';
import type { Containment, ContainmentAttestation } from '../../domain/containment';
import { refusal, YokeError } from '../../domain/errors';
import { assertContained, prepareContainment } from './containment';
import { assertDriver, lockRun } from './execution';
import { DEFAULT_DRIVER_FRESH_MS, DEFAULT_TAKEOVER_LOCK_TIMEOUT_MS } from '../../domain/timeouts';

/** How long the takeover waits for a row lock before it refuses (T3: bounded locks). */

/** After commit: moved executions continue under the successor; the predecessor's workflow ends superseded. */
export interface TakeoverNotifier {
  executionMoved(executionId: number, runId: string): Promise<void>;
  runSuperseded(runId: string, successorRunId: string): Promise<void>;
}

/** What the takeover read before taking any lock: the recheck under the locks compares against it. */
export interface PreparedTakeover {
  predecessor_run_id: string;
  successor_run_id: string;
  containment: Containment;
  /** The mutable inputs eligibility and containment were judged on. */
  inputs: TakeoverInputs;
}

interface TakeoverInputs {
  predecessor: RunInputs;
  /** Null when the successor is created in the takeover's own transaction (start-for-item). */
  successor: RunInputs | null;
  unclosed_members: number[];
}

interface RunInputs {
  status: string;
  candidate_sha: string;
  flow_id: number;
  target_environment_id: number;
  walk: number;
  supersedes_run_id: string | null;
  superseded_by_run_id: string | null;
}

export interface TakeoverReceipt {
  predecessor_run_id: string;
  successor_run_id: string;
  predecessor_status: string;
  containment: Containment;
  moved_members: string[];
  moved_qa: string[];
  moved_executions: number[];
  occupancy_units: string[];
  /** The moved executions that were still running: their workflows continue under the successor. */
  live_executions: number[];
  warnings: string[];
}

/** Postgres gave up waiting for a lock (lock_timeout). */
function lockTimedOut(err: unknown): boolean {
  return (err as { code?: string })?.code === '55P03';
}

function inputsOf(run: RunRow): RunInputs {
  return {
    status: run.status,
    candidate_sha: run.candidate_sha,
    flow_id: run.flow_id,
    target_environment_id: run.target_environment_id,
    walk: run.walk,
    supersedes_run_id: run.supersedes_run_id,
    superseded_by_run_id: run.superseded_by_run_id,
  };
}

/** Names of the inputs that differ between the prepared read and the locked one. */
function changedInputs(before: TakeoverInputs, now: TakeoverInputs): string[] {
  const changed: string[] = [];
  for (const side of ['predecessor', 'successor'] as const) {
    const [was, is] = [before[side], now[side]];
    if (!was || !is) continue;
    for (const k of Object.keys(was) as (keyof RunInputs)[]) if (was[k] !== is[k]) changed.push(`${side}.${k}`);
  }
  if (before.unclosed_members.join(',') !== now.unclosed_members.join(','))
    changed.push('predecessor.unclosed_members');
  return changed;
}

/**
 * T1: the predecessor waits on item or run-level QA: executing (not settling), no stage
 * running, and either its cursor is at a waiting QA stage or blocking QA is still outstanding
 * (the Q4 hold) — members or none. A failed successor that still owns inherited QA stays
 * eligible. The successor is a created run of the same project, flow and target.
 */
async function eligibility(db: Executor, pred: RunRow, succ: RunRow): Promise<void> {
  successorEligibility(pred, succ);
  await predecessorEligibility(db, pred, succ.run_id);
}

function successorEligibility(pred: RunRow, succ: RunRow): void {
  const ids = { predecessor_run_id: pred.run_id, successor_run_id: succ.run_id };
  // The same takeover again (a repeat after a lost answer): it is done; say so, and what is next.
  if (pred.superseded_by_run_id === succ.run_id)
    throw refusal(
      'run_superseded',
      `run ${pred.run_id} was already taken over by run ${succ.run_id}: this takeover is done, nothing to repeat`,
      {
        recovery:
          succ.status === 'created'
            ? `continue with the successor: yoke deployment-runs execute ${succ.run_id}`
            : `continue with the successor: yoke deployment-runs get ${succ.run_id}`,
        details: { ...ids, superseded_by_run_id: succ.run_id, successor_status: succ.status },
      },
    );
  if (pred.run_id === succ.run_id)
    throw refusal('takeover_same_run', `run ${pred.run_id} cannot take itself over`, {
      recovery: 'name a newer run of the same flow and target with --successor',
      details: ids,
    });
  if (
    pred.project_id !== succ.project_id ||
    pred.flow_id !== succ.flow_id ||
    pred.target_environment_id !== succ.target_environment_id
  )
    throw refusal(
      'takeover_flow_or_target_differs',
      `run ${succ.run_id} is not of run ${pred.run_id}'s project, flow and target; only a run of the same flow and target takes over`,
      {
        recovery: `create the successor with the predecessor's --flow and --target: yoke deployment-runs get ${pred.run_id} flow target`,
        details: ids,
      },
    );
  if (succ.status !== 'created' || succ.supersedes_run_id)
    throw refusal(
      'takeover_successor_not_created',
      `run ${succ.run_id} is ${succ.status}${succ.supersedes_run_id ? ` and already took over run ${succ.supersedes_run_id}` : ''}; a successor takes over before it executes`,
      {
        recovery: 'create a new run with the newer candidate and name it with --successor',
        details: { ...ids, status: succ.status, supersedes_run_id: succ.supersedes_run_id },
      },
    );
}

/** T1 for the predecessor alone (start-for-item looks for one before its successor exists). */
async function predecessorEligibility(db: Executor, pred: RunRow, successor: string | null): Promise<void> {
  const ids = { predecessor_run_id: pred.run_id, successor_run_id: successor };
  if (pred.superseded_by_run_id)
    throw refusal('run_superseded', `run ${pred.run_id} was already taken over by run ${pred.superseded_by_run_id}`, {
      recovery: `take over the newest run of the chain instead: yoke deployment-runs get ${pred.superseded_by_run_id}`,
      details: { ...ids, superseded_by_run_id: pred.superseded_by_run_id },
    });
  if (pred.status === 'failed' && pred.supersedes_run_id) {
    if ((await runHasQa(db, pred.run_id)) || (await runHasExecutions(db, pred.run_id))) return;
  }
  if (pred.status === 'executing' && !pred.settling_at) {
    const stages = await stageStatuses(db, pred.run_id);
    const running = stages.some((s) => s.status === 'running');
    const atQa = stages.some((s) => s.ordinal === pred.cursor_ordinal && s.kind === 'qa' && s.status === 'waiting');
    if (!running && (atQa || (await qaStageOutstanding(db, pred.run_id, null)).length > 0)) return;
  }
  throw refusal(
    'takeover_predecessor_not_waiting',
    `run ${pred.run_id} is ${pred.status}${pred.status === 'executing' && pred.settling_at ? ' (settling)' : ''}${pred.current_stage ? ` at stage ${pred.current_stage}` : ''}; only a run waiting on item or run-level QA (or a failed successor that still owns inherited QA) can be taken over`,
    {
      recovery: `see where it is: yoke deployment-runs get ${pred.run_id} status current_stage stages`,
      details: { ...ids, status: pred.status, current_stage: pred.current_stage },
    },
  );
}

/**
 * Takeover (T1-T3): a newer candidate on the same flow and target takes over a run waiting on
 * QA. Containment is prepared first, outside any lock (a git call); then one transaction under
 * bounded locks rechecks every prepared input and moves everything set-based. After commit the
 * moved executions' workflows continue under the successor and the predecessor's ends.
 */
export function takeoverActivities(deps: {
  db: Kysely<Database>;
  driverFreshMs?: number;
  takeoverNotifier?: TakeoverNotifier;
  takeoverLockTimeoutMs?: number;
}) {
  const { db } = deps;
  const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;
  const lockTimeoutMs = deps.takeoverLockTimeoutMs ?? DEFAULT_TAKEOVER_LOCK_TIMEOUT_MS;

  /** Containment read in the predecessor's project repository (or from the relayed attestation). */
  async function containmentOf(pred: RunRow, successorCommit: string, attestation?: ContainmentAttestation) {
    const project = await projectById(db, pred.project_id);
    return prepareContainment({
      repository: project.repository,
      predecessorCommit: pred.candidate_sha,
      successorCommit,
      attestation,
    });
  }

  /** T3: everything that may be slow (git) happens here, with no lock held. */
  async function prepareTakeover(input: {
    predecessorRunId: string;
    successorRunId: string;
    attestation?: ContainmentAttestation;
  }): Promise<PreparedTakeover> {
    const [pred, succ] = await Promise.all([runById(db, input.predecessorRunId), runById(db, input.successorRunId)]);
    await eligibility(db, pred, succ);
    const containment = await containmentOf(pred, succ.candidate_sha, input.attestation);
    assertContained(containment, pred.run_id, succ.run_id);
    return {
      predecessor_run_id: pred.run_id,
      successor_run_id: succ.run_id,
      containment,
      inputs: {
        predecessor: inputsOf(pred),
        successor: inputsOf(succ),
        unclosed_members: await unclosedMemberIds(db, pred.run_id),
      },
    };
  }

  /**
   * D4: the run start-for-item takes over, prepared before its transaction: the newest run of
   * the same flow and target waiting on QA that the caller may drive and whose candidate the
   * new one contains. A waiting run it cannot take over is named in a warning, not refused:
   * the new run is still created (and waits for the origin at execute).
   */
  async function prepareStartTakeover(input: {
    projectId: number;
    flowId: number;
    targetId: number;
    candidate: string;
    sessionId: string | null;
  }): Promise<{ prepared: PreparedTakeover | null; skipped: { run_id: string; reason: string }[] }> {
    const waiting = await takeoverCandidates(db, input);
    const skipped: { run_id: string; reason: string }[] = [];
    for (const pred of waiting) {
      try {
        await predecessorEligibility(db, pred, null);
      } catch {
        continue; // not waiting on QA: not a takeover candidate at all
      }
      try {
        if (input.sessionId)
          assertDriver(
            { ...pred, driver_live: await driverAttachmentLive(db, pred, freshMs) },
            input.sessionId,
            freshMs,
          );
        else if (await driverAttachmentLive(db, pred, freshMs))
          throw refusal('run_driven_elsewhere', `run ${pred.run_id} is driven by session ${pred.driver_session_id}`, {
            recovery: 'start with --session of its driver',
          });
        const containment = await containmentOf(pred, input.candidate);
        assertContained(containment, pred.run_id, 'the new run');
        return {
          prepared: {
            predecessor_run_id: pred.run_id,
            successor_run_id: '',
            containment,
            inputs: {
              predecessor: inputsOf(pred),
              successor: null,
              unclosed_members: await unclosedMemberIds(db, pred.run_id),
            },
          },
          skipped,
        };
      } catch (err) {
        if (!(err instanceof YokeError)) throw err;
        skipped.push({ run_id: pred.run_id, reason: `${err.code}: ${err.message}` });
      }
    }
    return { prepared: null, skipped };
  }

  /**
   * The move, inside the caller's transaction (start-for-item runs it inside its creation).
   * Both runs are locked in id order under lock_timeout; a prepared input that changed
   * refuses before anything is written, so the caller's rollback leaves no trace.
   */
  async function takeOverInside(
    trx: Transaction<Database>,
    prepared: PreparedTakeover,
    sessionId: string | null,
  ): Promise<Omit<TakeoverReceipt, 'warnings'>> {
    await setLocalTimeouts(trx, { lockTimeout: `${lockTimeoutMs}ms` });
    const ids = [prepared.predecessor_run_id, prepared.successor_run_id];
    const locked = new Map<string, Awaited<ReturnType<typeof lockRun>>>();
    for (const id of [...ids].sort()) locked.set(id, await lockRun(trx, id, freshMs));
    const pred = locked.get(ids[0]!)!;
    const succ = locked.get(ids[1]!)!;
    if (sessionId) {
      // R1: existing driver authority applies to both runs.
      assertDriver(pred, sessionId, freshMs);
      assertDriver(succ, sessionId, freshMs);
    }
    // Two takeovers of one run raced and the other committed first: the loser is told who won
    // (run_superseded, naming the successor), not only that its inputs changed.
    if (pred.superseded_by_run_id) await eligibility(trx, pred, succ);
    const now: TakeoverInputs = {
      predecessor: inputsOf(pred),
      successor: inputsOf(succ),
      unclosed_members: await unclosedMemberIds(trx, pred.run_id),
    };
    const changed = changedInputs(prepared.inputs, now);
    if (succ.candidate_sha !== prepared.containment.successor_commit) changed.push('successor.candidate_sha');
    if (changed.length) {
      throw refusal(
        'takeover_inputs_changed',
        `run ${pred.run_id} or ${succ.run_id} changed after the takeover was prepared (${changed.join(', ')}); nothing was moved`,
        {
          recovery: `look again and repeat: yoke deployment-runs takeover ${pred.run_id} --successor ${succ.run_id}`,
          details: { predecessor_run_id: pred.run_id, successor_run_id: succ.run_id, changed },
        },
      );
    }
    await eligibility(trx, pred, succ);
    const closedIds = await closedMemberIds(trx, pred.run_id);
    const executions = await lockMovingExecutions(trx, pred.run_id, closedIds);
    const moved: MoveResult = await moveToSuccessor(trx, pred.run_id, succ.run_id, {
      members: now.unclosed_members,
      closedItems: await itemLabels(trx, closedIds),
      executions: executions.map((e) => e.execution_id),
      restoreAutomatic: pred.status === 'failed',
    });
    await markSuperseded(trx, pred.run_id, succ.run_id);
    const after = await runById(trx, pred.run_id);
    await recordEvent(trx, {
      event_type: 'DeploymentRunTakenOver',
      project_id: pred.project_id,
      session_id: sessionId,
      payload: {
        predecessor_run_id: pred.run_id,
        successor_run_id: succ.run_id,
        containment: prepared.containment,
        members: moved.members,
        qa: moved.qa,
        executions: moved.executions,
        occupancy_units: moved.units,
      },
    });
    return {
      predecessor_run_id: pred.run_id,
      successor_run_id: succ.run_id,
      predecessor_status: after.status,
      containment: prepared.containment,
      moved_members: moved.members,
      moved_qa: moved.qa,
      moved_executions: moved.executions,
      occupancy_units: moved.units,
      live_executions: executions.filter((e) => e.status === 'running').map((e) => e.execution_id),
    };
  }

  /** The signals owed after commit; a failure is a warning (the workflows re-read Postgres). */
  async function afterCommit(r: Omit<TakeoverReceipt, 'warnings'>): Promise<string[]> {
    const n = deps.takeoverNotifier;
    if (!n) return [];
    const warnings: string[] = [];
    for (const id of r.live_executions) {
      try {
        await n.executionMoved(id, r.successor_run_id);
      } catch (err) {
        warnings.push(
          `could not tell execution ${id} it continues under ${r.successor_run_id}: ${(err as Error).message}`,
        );
      }
    }
    try {
      await n.runSuperseded(r.predecessor_run_id, r.successor_run_id);
    } catch (err) {
      warnings.push(`could not end run ${r.predecessor_run_id}'s workflow: ${(err as Error).message}`);
    }
    return warnings;
  }

  /**
   * Refusal for a lock the bound gave up on: nothing was written; repeating is safe. The repeat
   * carries the attestation the takeover was judged on (without it, a project git cannot read
   * refuses containment_unknown).
   */
  function busy(prepared: PreparedTakeover) {
    const c = prepared.containment;
    const attested =
      c.basis === 'attestation'
        ? ` --containment-attestation '${JSON.stringify({ predecessor_commit: c.predecessor_commit, successor_commit: c.successor_commit, contained: c.contained, attested_by: c.source })}'`
        : '';
    return refusal(
      'takeover_lock_timeout',
      `run ${prepared.predecessor_run_id} or ${prepared.successor_run_id} stayed locked by other work for ${lockTimeoutMs} ms; nothing was moved`,
      {
        recovery: `repeat: yoke deployment-runs takeover ${prepared.predecessor_run_id} --successor ${prepared.successor_run_id}${attested}`,
        details: { ...prepared, lock_timeout_ms: lockTimeoutMs },
      },
    );
  }

  /** Commits a prepared takeover in its own transaction, then sends the signals. */
  async function commitTakeover(prepared: PreparedTakeover, sessionId: string): Promise<TakeoverReceipt> {
    const r = await db
      .transaction()
      .execute(async (trx) => {
        await requireLiveSession(trx, sessionId);
        return takeOverInside(trx, prepared, sessionId);
      })
      .catch((err: unknown) => {
        throw lockTimedOut(err) ? busy(prepared) : err;
      });
    return { ...r, warnings: await afterCommit(r) };
  }

  /** `yoke deployment-runs takeover RUN --successor NEW`. */
  async function takeoverRun(input: {
    sessionId: string;
    runId: string;
    successorRunId: string;
    attestation?: ContainmentAttestation;
  }): Promise<TakeoverReceipt> {
    await requireLiveSession(db, input.sessionId);
    const prepared = await prepareTakeover({
      predecessorRunId: input.runId,
      successorRunId: input.successorRunId,
      attestation: input.attestation,
    });
    return commitTakeover(prepared, input.sessionId);
  }

  return { prepareTakeover, prepareStartTakeover, takeOverInside, commitTakeover, takeoverRun, afterCommit, busy };
}
