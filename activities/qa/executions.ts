import type { Kysely } from 'kysely';
import type { Database, ExecutionResultRow, ExecutionRow, RevisionCheck, SessionRow } from '../../db/database';
import { recordEvent } from '../../db/events';
import type { Executor } from '../../db/pool';
import { existingItem } from '../../db/projects';
import {
  advanceCursor,
  clearHeldClaim,
  executionById,
  hasHeldMachine,
  insertExecution,
  insertResult,
  itemLabel,
  leaseOf,
  planIdsOf,
  planOf,
  predecessorOnHost,
  recordLease,
  resultsOf,
  runningExecutionsOf,
} from '../../db/qaExecutions';
import { isMember } from '../../db/runMembers';
import { runById, runFlow, runProjectName, stageEnvironment } from '../../db/runs';
import { takeoverChain } from '../../db/takeover';
import { requireLiveSession, sessionById } from '../../db/sessions';
import { insertCheck, lastCheck, testMachineByName } from '../../db/testMachines';
import { isUnhealthy, waitViews, type WaitView } from '../../db/waits';
import { qaStageNotFound } from '../../domain/qaStages';
import { refusal, YokeError } from '../../domain/errors';
import { operatorKeyOf } from '../../domain/operatorKeys';
import { parseItemRef } from '../../domain/itemRef';
import { placeToTake } from '../../domain/placeTaking';
import {
  fillCommand,
  interruptionRationale,
  isHumanStep,
  needsMachineAfter,
  planSteps,
  qaBeginCommand,
  type PlanStep,
} from '../../domain/qaPlan';
import { claimActivities } from '../claims';
import { readCredential, runOverSsh, SshUnavailable, type SshTimeouts } from '../hosts/ssh';
import { DEFAULT_DRIVER_FRESH_MS, DEFAULT_SSH_TIMEOUTS } from '../../domain/timeouts';
import {
  DEFAULT_RESERVATION_LIFETIME_MS,
  inLineTransaction,
  joinLine,
  lockClaimForRelease,
  releaseServingLine,
  type LineOptions,
} from '../waitingLine';
import { requireRunAuthority } from './authority';
import { endExecution, noQaEffects, notifyQa, type QaNotifier } from './ending';
import { askServedRevision, type ServedRevision } from './servedRevision';

export interface DeploymentStartIdentity {
  target: string;
  target_url: string | null;
  served_revision_path: string;
  delivered_commit: string;
}

export interface BeginResult {
  execution_id: number;
  run_id: string;
  stage: string;
  plan_id: string;
  item: string | null;
  workflow_id: string;
  deployment_start_identity: DeploymentStartIdentity;
  served_revision: ServedRevision;
  steps: PlanStep[];
  /**
   * The caller's other running executions of this run, stage, plan and item, begun before this
   * one: a `qa begin` repeated after a lost answer begins a second execution, and says so.
   */
  also_running: { execution_id: number; began_at: string }[];
  /** What the execution will not do that its caller may expect (an item's execution at a run-scoped stage). */
  warnings: string[];
}

export interface StepView extends PlanStep {
  verdict: string | null;
  observed_commit: string | null;
  revision_check: RevisionCheck | null;
  exit_code: number | null;
  note: string | null;
  recorded_at: string | null;
  /** T3: the run that owned the execution when this case was recorded (an ancestor after a takeover). */
  verdict_run_id: string | null;
}

export interface ExecutionView {
  execution_id: number;
  run_id: string;
  stage: string;
  plan_id: string;
  item: string | null;
  session_id: string;
  status: string;
  deployment_start_identity: DeploymentStartIdentity;
  served_revision: { revision_check: RevisionCheck; observed_commit: string | null; detail: string | null };
  cursor_ordinal: number;
  held_claim_id: number | null;
  steps: StepView[];
  waits: WaitView[];
  began_at: string;
  ended_at: string | null;
  release_reason: string | null;
  /** T3: the run that owned the execution when it ended. */
  verdict_run_id: string | null;
  /** W9: set while it runs with no place in any line because its last one was cancelled with its session (strandedWait). */
  stranded: StrandedWait | null;
  /** W2 W3 W8: set while it waits in the line of an unhealthy machine, which only a successful verify serves. */
  unhealthy_machine: UnhealthyLine | null;
}

export interface UnhealthyLine {
  test_machine: string;
  /** The newest verification's reason (ssh_unavailable, ...): why the machine is unhealthy. */
  reason: string | null;
  recovery: string;
}

export interface StrandedWait {
  test_machine: string;
  recovery: string;
}

/**
 * W9: a running execution whose last place in a machine's line was cancelled because its
 * session ended waits for a turn nobody will reserve: it says so, and the way out (its actor
 * aborts it from a live session and begins again), instead of looking merely slow.
 */
function strandedWait(v: Omit<ExecutionView, 'stranded' | 'unhealthy_machine'>): StrandedWait | null {
  if (v.status !== 'running' || v.waits.some((w) => w.state === 'waiting' || w.state === 'reserved')) return null;
  const last = [...v.waits].sort((a, b) => a.wait_id - b.wait_id).at(-1); // the newest place it took (W6 may back-date queued_at)
  if (!last || last.state !== 'cancelled' || last.cancel_reason !== 'session_ended') return null;
  return {
    test_machine: last.test_machine,
    recovery: `yoke qa abort ${v.execution_id} --reason R --session <a live session>, then ${qaBeginCommand(v)} again`,
  };
}

/** What running one step's command found. */
export type StepOutcome =
  | {
      kind: 'ran';
      test_machine: string;
      exit_code: number | null;
      timed_out: boolean;
      output_digest: string;
      output_excerpt: string;
    }
  | { kind: 'ssh_unavailable'; test_machine: string; detail: string };

export type HostTurn =
  | { held: true; claim_id: number }
  | { held: false; ended: true; status: string }
  | { held: false; ended: false; position: number; reason: string };

const EXCERPT_CHARS = 4000;

type LineTrx = Parameters<Parameters<typeof inLineTransaction>[2]>[0];
type LineTrxEffects = Parameters<Parameters<typeof inLineTransaction>[2]>[1];

function identityOf(e: ExecutionRow): DeploymentStartIdentity {
  return {
    target: e.target_environment,
    target_url: e.target_url,
    served_revision_path: e.served_revision_path,
    delivered_commit: e.delivered_commit,
  };
}

/** A recorded case as the workflow and the CLI see it (the workflow's RecordedCase). */
export interface RecordedCase {
  execution_id: number;
  case: string;
  verdict: string;
  observed_commit: string | null;
  revision_check: string;
  recorded: boolean;
}

/** A human verdict or waiver as the CLI answers it; `recorded` is false when it was already there. */
function humanAnswer(e: ExecutionRow, row: ExecutionResultRow, recorded: boolean) {
  return {
    execution_id: e.execution_id,
    case: row.case_name,
    verdict: row.verdict,
    observed_commit: row.observed_commit,
    revision_check: row.revision_check,
    recorded,
    recorded_at: row.recorded_at.toISOString(),
  };
}

/** An execution already aborted for this very reason: a repeated `qa abort`. */
function sameAbort(e: ExecutionRow, reason: string): boolean {
  return e.status === 'aborted' && e.release_reason === reason;
}

/**
 * A settled execution's cases are closed; the recovery begins one like it again, for the same
 * member (qaBeginCommand), while its run still executes (a begin on an ended run is refused).
 */
async function settledRefusal(db: Executor, e: ExecutionRow) {
  const again = qaBeginCommand({ ...e, stage: e.stage_name, item: await itemLabel(db, e.item_id) });
  const run = await runById(db, e.run_id);
  return refusal('qa_execution_settled', `QA plan execution ${e.execution_id} is ${e.status}; its cases are closed`, {
    recovery:
      run.status === 'executing'
        ? `begin a new one: ${again}`
        : `nothing to record: run ${run.run_id} is ${run.status} (see it: yoke qa get ${e.execution_id})`,
    details: { execution_id: e.execution_id, status: e.status },
  });
}

/**
 * QA plan executions (Q1, Q2, W2, W3, W6, W9): beginning one with its start identity, the
 * steps its workflow runs (host turns, SSH commands, recorded cases), human verdicts and
 * waivers, and every way it ends.
 */
export function qaExecutionActivities(deps: {
  db: Kysely<Database>;
  line?: Partial<LineOptions>;
  ssh?: Partial<SshTimeouts>;
  driverFreshMs?: number;
  qaNotifier?: QaNotifier;
}) {
  const { db } = deps;
  const lifetimeMs = deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;
  const notifier = deps.line?.notifier;
  const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;
  const ssh: SshTimeouts = { ...DEFAULT_SSH_TIMEOUTS, ...deps.ssh };
  const claims = claimActivities({ db, line: deps.line });

  /** Runs fn with waiting-line and QA effects, then sends both after commit. */
  async function ending<T>(
    fn: (
      trx: Parameters<Parameters<typeof inLineTransaction>[2]>[0],
      effects: Parameters<Parameters<typeof inLineTransaction>[2]>[1],
      qa: ReturnType<typeof noQaEffects>,
    ) => Promise<T>,
  ): Promise<{ value: T; warnings: string[] }> {
    const qa = noQaEffects();
    const { value, warnings } = await inLineTransaction<T>(db, notifier, (trx, effects) => fn(trx, effects, qa));
    return { value, warnings: [...warnings, ...(await notifyQa(deps.qaNotifier, qa))] };
  }

  async function probe(e: ExecutionRow): Promise<ServedRevision> {
    return askServedRevision(e.target_url, e.served_revision_path, e.delivered_commit);
  }

  /**
   * `yoke qa begin` (Q1, Q2): the execution's start identity is the stage's persistent target,
   * its served-revision path and the commit the run delivered; the target is asked what it
   * serves before any host reset or gate, and the answer is recorded with the execution.
   */
  async function beginExecution(input: {
    sessionId: string;
    runId: string;
    stage: string;
    plan: string;
    item?: string;
  }): Promise<BeginResult> {
    const session = await requireLiveSession(db, input.sessionId);
    const run = await runById(db, input.runId);
    if (run.status !== 'executing') {
      throw refusal('run_not_executing', `run ${run.run_id} is ${run.status}; QA runs against an executing run`, {
        recovery:
          run.status === 'created'
            ? `execute it first: yoke deployment-runs execute ${run.run_id}`
            : 'begin QA on a live run',
        details: { run_id: run.run_id, status: run.status },
      });
    }
    const flow = await runFlow(db, run);
    const stage = flow.stages.find((s) => s.name === input.stage);
    if (!stage || stage.kind !== 'qa') throw qaStageNotFound(run.run_id, flow.stages, input.stage);
    const plan = await planOf(db, run.project_id, input.plan);
    if (!plan) {
      throw refusal('qa_plan_not_found', `the run's project has no QA plan ${input.plan}`, {
        recovery: `declare it under plans: and apply, or name one of: ${(await planIdsOf(db, run.project_id)).join(', ') || '(none)'}`,
        details: { plan_id: input.plan },
      });
    }
    let itemId: number | null = null;
    let itemName: string | null = null;
    if (input.item) {
      const item = await existingItem(db, parseItemRef(input.item));
      if (!(await isMember(db, run.run_id, item.item_id))) {
        throw refusal('item_not_member', `item ${item.item} is not a member of run ${run.run_id}`, {
          recovery: `see the members: yoke deployment-runs get ${run.run_id} member_items`,
          details: { run_id: run.run_id, item: item.item },
        });
      }
      itemId = item.item_id;
      itemName = item.item;
    }
    const env = await stageEnvironment(db, run.project_id, stage.target);
    // Q2: asked before the execution exists, so before any host reset or gate can run.
    const served = await askServedRevision(env.url, env.served_revision_path, run.candidate_sha);
    const scope = {
      run_id: run.run_id,
      stage_name: stage.name,
      plan_id: input.plan,
      item_id: itemId,
      session_id: session.session_id,
    };
    const row = await db.transaction().execute(async (trx) => {
      const e = await insertExecution(trx, {
        run_id: run.run_id,
        stage_name: stage.name,
        plan_id: input.plan,
        item_id: itemId,
        plan,
        session_id: session.session_id,
        target_environment: env.name,
        target_url: env.url,
        served_revision_path: env.served_revision_path,
        delivered_commit: run.candidate_sha,
        observed_commit: served.observed_commit,
        revision_check: served.revision_check,
        revision_detail: served.detail,
      });
      await recordEvent(trx, {
        event_type: 'QaPlanExecutionBegun',
        project_id: run.project_id,
        session_id: session.session_id,
        payload: { execution_id: e.execution_id, run_id: run.run_id, stage: stage.name, plan_id: input.plan },
      });
      return e;
    });
    return {
      execution_id: row.execution_id,
      run_id: row.run_id,
      stage: row.stage_name,
      plan_id: row.plan_id,
      item: await itemLabel(db, row.item_id),
      workflow_id: `qa-plan-execution/${row.execution_id}`,
      deployment_start_identity: identityOf(row),
      served_revision: served,
      steps: planSteps(plan),
      // Begun all the same (it answers the item's own checks, ITEM/..., and its evidence is kept),
      // but not the run-scoped stage's run checks, which wait for an execution begun without --item.
      warnings:
        itemId !== null && stage.scope === 'run'
          ? [
              `stage ${stage.name} is run-scoped: this execution answers only ${itemName}'s own checks of plan ${input.plan} there, not the stage's run checks; those are answered by one begun without --item: yoke qa begin --run ${run.run_id} --stage ${stage.name} --plan ${input.plan}`,
            ]
          : [],
      also_running: (await runningExecutionsOf(db, scope))
        // only those begun before this one: two racing begins must not each tell its user to abort its own
        .filter((e) => e.execution_id < row.execution_id)
        .map((e) => ({ execution_id: e.execution_id, began_at: e.began_at.toISOString() })),
    };
  }

  async function getExecution(input: { executionId: number }): Promise<ExecutionView> {
    const e = await executionById(db, input.executionId);
    const results = new Map((await resultsOf(db, e.execution_id)).map((r) => [r.case_name, r]));
    const view: Omit<ExecutionView, 'stranded' | 'unhealthy_machine'> = {
      execution_id: e.execution_id,
      run_id: e.run_id,
      stage: e.stage_name,
      plan_id: e.plan_id,
      item: await itemLabel(db, e.item_id),
      session_id: e.session_id,
      status: e.status,
      deployment_start_identity: identityOf(e),
      served_revision: {
        revision_check: e.revision_check,
        observed_commit: e.observed_commit,
        detail: e.revision_detail,
      },
      cursor_ordinal: e.cursor_ordinal,
      held_claim_id: e.held_claim_id,
      steps: planSteps(e.plan).map((s) => {
        const r = results.get(s.name);
        return {
          ...s,
          verdict: r?.verdict ?? null,
          observed_commit: r?.observed_commit ?? null,
          revision_check: r?.revision_check ?? null,
          exit_code: r?.exit_code ?? null,
          note: r?.note ?? null,
          recorded_at: r?.recorded_at.toISOString() ?? null,
          verdict_run_id: r?.verdict_run_id ?? null,
        };
      }),
      waits: (await waitViews(db, {})).filter((w) => w.qa_plan_execution_id === e.execution_id),
      began_at: e.began_at.toISOString(),
      ended_at: e.ended_at?.toISOString() ?? null,
      release_reason: e.release_reason,
      verdict_run_id: e.verdict_run_id,
    };
    return { ...view, stranded: strandedWait(view), unhealthy_machine: await unhealthyLine(view) };
  }

  /**
   * W8: an unhealthy machine's line is served only by the release that ends a successful
   * `yoke test-machine verify` on it, so an execution waiting there says why and how, instead of
   * reading as merely slow (it waited a day for a release nobody would make).
   */
  async function unhealthyLine(
    v: Omit<ExecutionView, 'stranded' | 'unhealthy_machine'>,
  ): Promise<UnhealthyLine | null> {
    const waiting = v.status === 'running' ? v.waits.find((w) => w.state === 'waiting') : undefined;
    if (!waiting || !(await isUnhealthy(db, waiting.test_machine))) return null;
    const check = await lastCheck(db, waiting.test_machine, 'verification', { passedOnly: false });
    return {
      test_machine: waiting.test_machine,
      reason: check && !check.passed ? check.reason : null,
      recovery: `yoke test-machine verify ${waiting.test_machine} once it answers again (a successful verify serves its line)`,
    };
  }

  function stepAt(e: ExecutionRow, ordinal: number): PlanStep {
    return planSteps(e.plan)[ordinal]!;
  }

  /**
   * W2/W6: the step's machine for this execution. A held machine (its own lease) is kept; a
   * free healthy one is leased through the claim path; otherwise the execution joins the line
   * (its wait carries the execution id), taking an aborted predecessor's place where W6 says so.
   */
  async function acquireHost(input: { executionId: number; ordinal: number }): Promise<HostTurn> {
    const e = await executionById(db, input.executionId);
    if (e.status !== 'running') return { held: false, ended: true, status: e.status };
    const machine = stepAt(e, input.ordinal).test_machine!;
    if (e.held_claim_id !== null) {
      const held = await leaseOf(db, e.held_claim_id);
      if (held && !held.released_at && held.machine === machine) return { held: true, claim_id: held.claim_id };
      if (held && !held.released_at) await releaseLease(e, `moving to test machine ${machine}`);
    }
    let queuedAt: string | undefined;
    if (e.item_id === null && !(await hasHeldMachine(db, e.execution_id, machine))) {
      queuedAt = placeToTake({ hasHeldHost: false }, await predecessorOnHost(db, e, machine)) ?? undefined;
    }
    try {
      // C8: the hold is the run's project's (its steering seat may release it), whatever project the runner's session names
      const { claim } = await claims.acquireCoordinationClaim({
        sessionId: e.session_id,
        key: operatorKeyOf('qa_admission', { test_machine: machine })!,
        project: await runProjectName(db, e.run_id),
        join: { resumeCommand: `yoke qa watch ${e.execution_id}`, qaPlanExecutionId: e.execution_id, queuedAt },
      });
      // The lease is written under the execution's row lock: an execution that ended meanwhile
      // gives the machine straight back.
      const kept = await inLineTransaction(db, notifier, async (trx, effects) => {
        const locked = await executionById(trx, e.execution_id, { lock: true });
        const row = await lockClaimForRelease(trx, claim.claim_id);
        if (locked.status !== 'running') {
          if (row && !row.released_at)
            await releaseServingLine(
              trx,
              row,
              {
                reason: `QA plan execution ${e.execution_id} ${locked.status}`,
                bySessionId: e.session_id,
                byActorId: null,
              },
              lifetimeMs,
              effects,
            );
          return false;
        }
        await recordLease(trx, e.execution_id, {
          claim_id: claim.claim_id,
          test_machine: machine,
          claimed_at: new Date(claim.claimed_at),
        });
        return true;
      });
      if (!kept.value) return { held: false, ended: true, status: 'ended' };
      return { held: true, claim_id: claim.claim_id };
    } catch (err) {
      if (err instanceof YokeError && err.details.wait) {
        const wait = err.details.wait as { position: number };
        return { held: false, ended: false, position: wait.position, reason: `${err.code}: ${err.message}` };
      }
      throw err;
    }
  }

  async function releaseLease(e: ExecutionRow, reason: string): Promise<void> {
    await inLineTransaction(db, notifier, async (trx, effects) => {
      const locked = await executionById(trx, e.execution_id, { lock: true });
      if (locked.held_claim_id === null) return;
      const claim = await lockClaimForRelease(trx, locked.held_claim_id);
      if (claim && !claim.released_at)
        await releaseServingLine(
          trx,
          claim,
          { reason: `QA plan execution ${e.execution_id}: ${reason}`, bySessionId: e.session_id, byActorId: null },
          lifetimeMs,
          effects,
        );
      await clearHeldClaim(trx, e.execution_id);
    });
  }

  /** Runs an automatic step's (or the host reset's) command on its machine over SSH. */
  async function runStepCommand(
    input: { executionId: number; ordinal: number },
    control: { signal?: AbortSignal; onProgress?: () => void } = {},
  ): Promise<StepOutcome> {
    const e = await executionById(db, input.executionId);
    const step = stepAt(e, input.ordinal);
    const machine = await testMachineByName(db, step.test_machine!);
    if (!machine)
      return { kind: 'ssh_unavailable', test_machine: step.test_machine!, detail: 'no such test machine is added' };
    const command = fillCommand(step.command!, {
      commit: e.delivered_commit,
      run_id: e.run_id,
      url: e.target_url ?? '',
      execution_id: String(e.execution_id),
    });
    try {
      const result = await runOverSsh(
        {
          name: machine.name,
          host: machine.host,
          port: machine.port,
          user: machine.ssh_user,
          privateKey: () => readCredential(machine.credential, ssh.keyDir),
          hostKey: machine.host_key,
        },
        command,
        { ...ssh, ...control },
      );
      return {
        kind: 'ran',
        test_machine: machine.name,
        exit_code: result.exit_code,
        timed_out: result.timed_out,
        output_digest: result.output_digest,
        output_excerpt: `${result.stdout}${result.stderr ? `\n[stderr]\n${result.stderr}` : ''}`.slice(-EXCERPT_CHARS),
      };
    } catch (err) {
      if (err instanceof SshUnavailable)
        return { kind: 'ssh_unavailable', test_machine: machine.name, detail: err.detail };
      throw err;
    }
  }

  /**
   * Records an automatic step's verdict with the commit the target serves now (Q2); the lease
   * is released in the same transaction when no later step needs the machine.
   */
  async function recordStepOutcome(input: {
    executionId: number;
    ordinal: number;
    outcome: Extract<StepOutcome, { kind: 'ran' }>;
  }): Promise<{ case: string; verdict: string }> {
    const e = await executionById(db, input.executionId);
    const steps = planSteps(e.plan);
    const step = steps[input.ordinal]!;
    const served = await probe(e);
    const o = input.outcome;
    const passed = !o.timed_out && o.exit_code === step.pass_exit_status;
    const { value } = await inLineTransaction(db, notifier, async (trx, effects) => {
      const locked = await executionById(trx, e.execution_id, { lock: true });
      const { row } = await insertResult(trx, {
        execution_id: e.execution_id,
        case_name: step.name,
        ordinal: step.ordinal,
        kind: step.kind,
        verdict: passed ? 'passed' : 'failed',
        observed_commit: served.observed_commit,
        revision_check: served.revision_check,
        test_machine: o.test_machine,
        exit_code: o.exit_code,
        output_digest: o.output_digest,
        output_excerpt: o.output_excerpt,
        note: o.timed_out ? 'timed out' : null,
      });
      await advanceCursor(trx, e.execution_id, step.ordinal + 1);
      if (locked.held_claim_id !== null && !needsMachineAfter(steps, step.ordinal, o.test_machine)) {
        const claim = await lockClaimForRelease(trx, locked.held_claim_id);
        if (claim && !claim.released_at)
          await releaseServingLine(
            trx,
            claim,
            {
              reason: `QA plan execution ${e.execution_id} finished with ${o.test_machine}`,
              bySessionId: e.session_id,
              byActorId: null,
            },
            lifetimeMs,
            effects,
          );
        await clearHeldClaim(trx, e.execution_id);
      }
      return { case: row.case_name, verdict: row.verdict };
    });
    return value;
  }

  /**
   * W3: the execution gives its machine back (serving the line) and, while it runs, joins the
   * machine's line again, its wait saying why; inside the caller's line transaction, with the
   * execution's row locked.
   */
  async function giveBackAndRejoin(
    trx: LineTrx,
    effects: LineTrxEffects,
    locked: ExecutionRow,
    actorId: string,
    machine: string,
    why: string,
  ): Promise<{ position: number }> {
    if (locked.held_claim_id !== null) {
      const claim = await lockClaimForRelease(trx, locked.held_claim_id);
      if (claim && !claim.released_at)
        await releaseServingLine(
          trx,
          claim,
          { reason: why, bySessionId: locked.session_id, byActorId: null },
          lifetimeMs,
          effects,
        );
      await clearHeldClaim(trx, locked.execution_id);
    }
    if (locked.status !== 'running') return { position: 0 };
    const joined = await joinLine(
      trx,
      {
        test_machine: machine,
        session_id: locked.session_id,
        actor_id: actorId,
        resume_command: `yoke qa watch ${locked.execution_id}`,
        rationale: why,
        qa_plan_execution_id: locked.execution_id,
      },
      effects,
    );
    return { position: joined.position };
  }

  /**
   * W3: an SSH connection failure is a failed verification `ssh_unavailable` of the machine,
   * not an error verdict: the lease is released (the machine is now unhealthy, so nobody is
   * served it) and the execution joins the line, to be woken after a successful verify (W8).
   */
  async function recordSshUnavailable(input: {
    executionId: number;
    ordinal: number;
    detail: string;
  }): Promise<{ position: number }> {
    const e = await executionById(db, input.executionId);
    const machine = stepAt(e, input.ordinal).test_machine!;
    const { value } = await inLineTransaction(db, notifier, async (trx, effects) => {
      const locked = await executionById(trx, e.execution_id, { lock: true });
      const session = await requireLiveSession(trx, e.session_id);
      await insertCheck(trx, {
        request_id: `qa-plan-execution/${e.execution_id}/${input.ordinal}/${locked.held_claim_id ?? 'unheld'}`,
        test_machine: machine,
        kind: 'verification',
        passed: false,
        reason: 'ssh_unavailable',
        output_excerpt: input.detail.slice(0, EXCERPT_CHARS),
        session_id: e.session_id,
        qa_plan_execution_id: e.execution_id,
      });
      const why = interruptionRationale('ssh_unavailable', input.detail);
      return giveBackAndRejoin(trx, effects, locked, session.actor_id, machine, why);
    });
    return value;
  }

  /**
   * Issue 10 / W3: a case's command that never reported a result (the worker running it died or
   * lost its connection, the activity timed out) is an infrastructure failure, never a verdict:
   * the case runs again. Like ssh_unavailable, the lease is released (serving the line) and the
   * execution joins the machine's line, its wait naming why; the machine itself is not at fault,
   * so no failed verification is recorded. One transaction, after which the workflow's next
   * acquire takes the machine or waits its turn.
   */
  async function recordStepInterrupted(input: {
    executionId: number;
    ordinal: number;
    detail: string;
  }): Promise<{ position: number }> {
    const e = await executionById(db, input.executionId);
    const step = stepAt(e, input.ordinal);
    const machine = step.test_machine!;
    const why = interruptionRationale(
      'step_interrupted',
      `case ${step.name} did not report a result (${input.detail}); it runs again`,
    );
    const { value } = await inLineTransaction(db, notifier, async (trx, effects) => {
      const locked = await executionById(trx, e.execution_id, { lock: true });
      if (locked.status !== 'running') return { position: 0 };
      const session = await requireLiveSession(trx, e.session_id);
      await recordEvent(trx, {
        event_type: 'QaPlanCaseInterrupted',
        session_id: e.session_id,
        payload: {
          execution_id: e.execution_id,
          run_id: locked.run_id,
          case: step.name,
          test_machine: machine,
          detail: input.detail.slice(0, EXCERPT_CHARS),
        },
      });
      return giveBackAndRejoin(trx, effects, locked, session.actor_id, machine, why);
    });
    return value;
  }

  /**
   * The host reset and the human gate run first (their plan order): a human verdict on a later
   * step before they passed would record a case tested on a host not reset, or before the
   * gate's go-ahead. A waiver is a decision about the step, not a test, and is not held.
   */
  async function requireEarlierStepsDone(e: ExecutionRow, step: PlanStep) {
    const first = planSteps(e.plan).filter(
      (s) => s.ordinal < step.ordinal && (s.kind === 'host_reset' || s.kind === 'gate'),
    );
    if (first.length === 0) return;
    const results = new Map((await resultsOf(db, e.execution_id)).map((r) => [r.case_name, r.verdict]));
    const pending = first.find((s) => results.get(s.name) !== 'passed' && results.get(s.name) !== 'waived');
    if (!pending) return;
    const what = `${pending.kind === 'gate' ? 'gate' : 'host reset'} (${pending.name})`;
    if (results.get(pending.name) === 'failed') {
      // a failed gate or host reset ends the execution failed: no later case is tested
      throw refusal(
        'qa_step_failed',
        `case ${step.name} of execution ${e.execution_id} is not tested: its ${what} failed`,
        {
          recovery: `see it: yoke qa get ${e.execution_id}; begin the plan again once the cause is fixed`,
          details: { execution_id: e.execution_id, case: step.name, failed_step: pending.name },
        },
      );
    }
    throw refusal(
      'qa_step_pending',
      `case ${step.name} of execution ${e.execution_id} waits for its ${what}, which runs first`,
      {
        recovery:
          pending.kind === 'gate'
            ? `answer the gate first: yoke qa verdict ${e.execution_id} --case ${pending.name} --verdict passed (see yoke qa get ${e.execution_id})`
            : `wait for the host reset: yoke qa watch ${e.execution_id}`,
        details: { execution_id: e.execution_id, case: step.name, pending_step: pending.name },
      },
    );
  }

  async function recordHuman(
    input: { executionId: number; case: string; sessionId: string; runId?: string },
    verdict: 'passed' | 'failed' | 'waived',
    note: string | null,
    authorize: (e: ExecutionRow, session: SessionRow) => Promise<void>,
  ) {
    const e = await executionById(db, input.executionId);
    if (input.runId && input.runId !== e.run_id) {
      // T2: a takeover moves live executions to its successor; the caller may name the run it
      // began under (moved only when the execution's run descends from the named one)
      const chain = await takeoverChain(db, e.run_id);
      const moved = chain.includes(input.runId)
        ? `: it moved to run ${e.run_id} with the takeover of run ${input.runId} (chain ${chain.join(' -> ')})`
        : '';
      throw refusal(
        'qa_execution_wrong_run',
        `QA plan execution ${e.execution_id} belongs to run ${e.run_id}, not ${input.runId}${moved}`,
        {
          recovery: moved
            ? `repeat it with --run ${e.run_id} (or without --run)`
            : `record it against its own run, or find the execution of ${input.runId}: yoke deployment-runs qa-pending ${input.runId}`,
          details: { execution_id: e.execution_id, run_id: e.run_id, named_run_id: input.runId },
        },
      );
    }
    if (e.status !== 'running') {
      // A repeat whose first answer was lost: that verdict may have been the last one, so the
      // execution ended after recording it. The caller's own recorded verdict is replayed, not refused.
      const mine = (await resultsOf(db, e.execution_id)).find(
        (r) => r.case_name === input.case && r.verdict === verdict && r.recorded_by_session_id === input.sessionId,
      );
      if (!mine) throw await settledRefusal(db, e);
      return { ...humanAnswer(e, mine, false), execution_status: e.status, warnings: [] as string[] };
    }
    const step = planSteps(e.plan).find((s) => s.name === input.case);
    if (!step) {
      throw refusal('qa_case_not_found', `plan ${e.plan_id} has no case ${input.case}`, {
        recovery: `name one of: ${planSteps(e.plan)
          .map((s) => s.name)
          .join(', ')}`,
        details: { execution_id: e.execution_id, case: input.case },
      });
    }
    if (verdict !== 'waived' && !isHumanStep(step)) {
      throw refusal('qa_case_automatic', `case ${step.name} is automatic: its command's exit status is the verdict`, {
        recovery: `watch it: yoke qa watch ${e.execution_id}, or waive it: yoke qa waive ${e.execution_id} --case ${step.name} --reason R`,
        details: { execution_id: e.execution_id, case: step.name },
      });
    }
    const session = await requireLiveSession(db, input.sessionId);
    await authorize(e, session);
    if (verdict !== 'waived') await requireEarlierStepsDone(e, step);
    const served = await probe(e);
    const { row, recorded } = await db.transaction().execute(async (trx) => {
      const locked = await executionById(trx, e.execution_id, { lock: true });
      if (locked.status !== 'running') throw await settledRefusal(trx, locked);
      const written = await insertResult(trx, {
        execution_id: e.execution_id,
        case_name: step.name,
        ordinal: step.ordinal,
        kind: step.kind,
        verdict,
        observed_commit: served.observed_commit,
        revision_check: served.revision_check,
        note,
        recorded_by_session_id: input.sessionId,
      });
      if (!written.recorded && written.row.verdict !== verdict) {
        throw refusal('qa_case_already_recorded', `case ${step.name} is already recorded ${written.row.verdict}`, {
          recovery: `see it: yoke qa get ${e.execution_id}`,
          details: { execution_id: e.execution_id, case: step.name, verdict: written.row.verdict },
        });
      }
      return written;
    });
    // Issue 13: the row is the verdict; the execution's workflow is only woken to read it. A lost
    // nudge strands nothing (the workflow re-reads its cases on a timer) but delays it: said.
    const warnings: string[] = [];
    await deps.qaNotifier?.casesRecorded?.(e.execution_id).catch((err: unknown) => {
      warnings.push(
        `could not signal execution ${e.execution_id}'s workflow (${(err as Error).message}); the ${verdict === 'waived' ? 'waiver' : 'verdict'} is recorded, and the workflow reads it within 5 minutes by itself`,
      );
    });
    return { ...humanAnswer(e, row, recorded), execution_status: 'running', warnings };
  }

  /**
   * `yoke qa verdict`, run by the CLI under its caller's role: a human's verdict on a manual case
   * or the gate, by the actor who began the execution, else under R1's strict rule (the run's
   * live driver or a steering seat), as row-level security enforces it too (0017_qa_verdict_authority).
   */
  async function recordHumanVerdict(input: {
    executionId: number;
    case: string;
    verdict: 'passed' | 'failed';
    note?: string;
    sessionId: string;
    runId?: string;
  }) {
    return recordHuman(input, input.verdict, input.note ?? null, async (e, session) => {
      if (e.session_id === session.session_id) return;
      if ((await sessionById(db, e.session_id))?.actor_id === session.actor_id) return;
      await requireRunAuthority(
        db,
        await runById(db, e.run_id),
        session.session_id,
        freshMs,
        `record a verdict on QA case ${input.case} of execution ${e.execution_id}`,
      );
    });
  }

  /** `yoke qa waive` (R1), run by the CLI under its caller's role: the run's live driver, else a steering seat on the run's project. */
  async function waiveExecutionCase(input: { executionId: number; case: string; reason: string; sessionId: string }) {
    return recordHuman(input, 'waived', input.reason, async (e) => {
      await requireRunAuthority(
        db,
        await runById(db, e.run_id),
        input.sessionId,
        freshMs,
        `waive QA case ${input.case}`,
      );
    });
  }

  /** The cases recorded in Postgres: the execution's workflow reads its verdicts and waivers here, never from a message. */
  async function recordedCases(input: { executionId: number }): Promise<RecordedCase[]> {
    return (await resultsOf(db, input.executionId)).map((r) => ({
      execution_id: r.execution_id,
      case: r.case_name,
      verdict: r.verdict,
      observed_commit: r.observed_commit,
      revision_check: r.revision_check,
      recorded: false,
    }));
  }

  /**
   * The execution's status as Postgres records it: its workflow's safety re-read, so an end whose
   * signal was lost (the ending command died after its commit, Temporal away) still ends the workflow.
   */
  async function executionStatus(input: { executionId: number }): Promise<string> {
    return (await executionById(db, input.executionId)).status;
  }

  /** The workflow walked every step: the execution passes, or fails on its first failed case (W9). */
  async function finishExecution(input: {
    executionId: number;
    status: 'passed' | 'failed';
    reason: string;
  }): Promise<{ status: string; warnings: string[] }> {
    const { value, warnings } = await ending(async (trx, effects, qa) => {
      const ended = await endExecution(
        trx,
        input.executionId,
        input.status,
        input.reason,
        { sessionId: null, actorId: null },
        lifetimeMs,
        effects,
        qa,
      );
      return ended ? input.status : (await executionById(trx, input.executionId)).status;
    });
    return { status: value, warnings };
  }

  /** `yoke qa abort` (W9): the execution ends, its waits are cancelled and its lease released, in one transaction. */
  async function abortExecution(input: { sessionId: string; executionId: number; reason: string }) {
    const session = await requireLiveSession(db, input.sessionId);
    const e = await executionById(db, input.executionId);
    if (e.status !== 'running' && !sameAbort(e, input.reason)) throw await settledRefusal(db, e);
    // The actor who began it aborts it from any live session of its own (its runner session may
    // have ended while it waited: W9 cancelled its wait), as it records its verdicts and as
    // Postgres's policy allows; anyone else needs R1's driver or steering seat.
    const runnerActor =
      e.session_id === session.session_id || (await sessionById(db, e.session_id))?.actor_id === session.actor_id;
    if (!runnerActor)
      await requireRunAuthority(
        db,
        await runById(db, e.run_id),
        session.session_id,
        freshMs,
        `abort QA plan execution ${e.execution_id}`,
      );
    if (e.status !== 'running') return abortReplayed(e);
    const { value, warnings } = await ending(async (trx, effects, qa) => {
      const ended = await endExecution(
        trx,
        e.execution_id,
        'aborted',
        input.reason,
        { sessionId: session.session_id, actorId: session.actor_id },
        lifetimeMs,
        effects,
        qa,
      );
      if (!ended) {
        const now = await executionById(trx, e.execution_id);
        if (sameAbort(now, input.reason)) return null; // the same abort, by a racing repeat
        throw await settledRefusal(trx, now);
      }
      return {
        execution_id: e.execution_id,
        status: 'aborted',
        release_reason: input.reason,
        released_claim_id: ended.held_claim_id,
        replayed: false,
      };
    });
    return value ? { ...value, warnings } : abortReplayed(await executionById(db, e.execution_id));
  }

  /**
   * The same abort again (its first answer lost): nothing more is written, and the end is told to
   * the execution's workflow and run once more, since the first command may have died before it did.
   */
  async function abortReplayed(e: ExecutionRow) {
    const warnings = await notifyQa(deps.qaNotifier, {
      ended: [{ execution_id: e.execution_id, run_id: e.run_id, status: e.status }],
      retry: [],
    });
    return {
      execution_id: e.execution_id,
      status: 'aborted',
      release_reason: e.release_reason!,
      released_claim_id: null,
      replayed: true,
      warnings,
    };
  }

  return {
    beginExecution,
    getExecution,
    acquireHost,
    runStepCommand,
    recordStepOutcome,
    recordSshUnavailable,
    recordStepInterrupted,
    recordHumanVerdict,
    waiveExecutionCase,
    recordedCases,
    executionStatus,
    finishExecution,
    abortExecution,
  };
}

export type QaExecutionActivities = ReturnType<typeof qaExecutionActivities>;
