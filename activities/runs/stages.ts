import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { recordEvent } from '../../db/events';
import { requireLiveSession } from '../../db/sessions';
import { deployHostByName, runById, runFlow, stageEnvironment } from '../../db/runs';
import { openQaCheckNames, recordRunQaVerdict } from '../../db/runQa';
import {
  endStage,
  moveCursor,
  recordApproval,
  stageByName,
  stageApproval,
  stageStatuses,
  startStage,
} from '../../db/runStages';
import { refusal, usageError, YokeError } from '../../domain/errors';
import { qaClosedRefusal } from '../../domain/runRefusals';
import type { DeployActionDefinition } from '../../domain/projectDefinition';
import { readCredential, runOverSsh, SshUnavailable, type SshTimeouts } from '../hosts/ssh';
import { markTerminal } from './execution';
import { DEFAULT_DRIVER_FRESH_MS, DEFAULT_SSH_TIMEOUTS } from '../../domain/timeouts';
import { releaseOccupancyIfSettled, stageOutstanding } from './occupancy';
import { requireRunAuthority } from '../qa/authority';
import { noQaEffects, notifyQa, type QaNotifier } from '../qa/ending';
import { blockingQaUnresolved } from '../qa/pending';
import { DEFAULT_RESERVATION_LIFETIME_MS, noEffects, notifyLine, type LineOptions } from '../waitingLine';

export interface StagePlan {
  ordinal: number;
  name: string;
  kind: 'deploy' | 'qa' | 'approval' | 'auto';
  target: string;
}

export interface StageResult {
  ok: boolean;
  detail: string;
}

const DETAIL_CHARS = 4000;

function fill(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, key: string) => values[key] ?? whole);
}

/**
 * The DeploymentRun workflow's steps. Each is idempotent: the workflow may retry any of
 * them, and Postgres stays the record of where the run is.
 */
export function runStageActivities(deps: {
  db: Kysely<Database>;
  ssh?: Partial<SshTimeouts>;
  line?: Partial<LineOptions>;
  qaNotifier?: QaNotifier;
  driverFreshMs?: number;
}) {
  const { db } = deps;
  const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;
  const ssh: SshTimeouts = { ...DEFAULT_SSH_TIMEOUTS, ...deps.ssh };

  /**
   * Where a walk starts: the run's status, the walk that owns the cursor, and the first stage
   * not yet passed (a restarted or continued workflow never redeploys a passed stage).
   */
  async function loadRunPlan(input: { runId: string }): Promise<{
    status: string;
    walk: number;
    cursor: number;
    stages: StagePlan[];
    superseded_by_run_id: string | null;
  }> {
    const run = await runById(db, input.runId);
    const flow = await runFlow(db, run);
    const done = await stageStatuses(db, run.run_id);
    const firstOpen = flow.stages.findIndex((_, i) => done.find((d) => d.ordinal === i)?.status !== 'passed');
    return {
      status: run.status,
      superseded_by_run_id: run.superseded_by_run_id,
      walk: run.walk,
      cursor: firstOpen < 0 ? flow.stages.length : firstOpen,
      stages: flow.stages.map((s, ordinal) => ({ ordinal, name: s.name, kind: s.kind, target: s.target })),
    };
  }

  /**
   * The run's status now (the workflow labels itself with it when it ends), and the run that
   * took it over, if any (T2: a predecessor's workflow ends superseded even when the takeover's
   * signal never reached it).
   */
  async function runStatus(input: { runId: string }): Promise<{ status: string; superseded_by_run_id: string | null }> {
    const run = await runById(db, input.runId);
    return { status: run.status, superseded_by_run_id: run.superseded_by_run_id };
  }

  /**
   * Moves the cursor to the stage (current_stage, cursor_ordinal) and marks it started. Only
   * the walk that owns the run moves it: a superseded workflow is told to stop.
   */
  async function beginStage(input: {
    runId: string;
    ordinal: number;
    walk: number;
  }): Promise<{ proceed: boolean; status: string; superseded: boolean; superseded_by_run_id?: string | null }> {
    return db.transaction().execute(async (trx) => {
      const run = await runById(trx, input.runId, { lock: true });
      if (run.walk !== input.walk) return { proceed: false, status: run.status, superseded: true };
      if (run.status !== 'executing')
        return {
          proceed: false,
          status: run.status,
          superseded: false,
          superseded_by_run_id: run.superseded_by_run_id,
        };
      const flow = await runFlow(trx, run);
      const stage = flow.stages[input.ordinal]!;
      const waits = stage.kind === 'qa' || stage.kind === 'approval';
      const started = await startStage(trx, run.run_id, input.ordinal, waits ? 'waiting' : 'running');
      await moveCursor(trx, run.run_id, stage.name, input.ordinal);
      if (started) {
        await recordEvent(trx, {
          event_type: 'DeploymentRunStageStarted',
          project_id: run.project_id,
          payload: { run_id: run.run_id, stage: stage.name, ordinal: input.ordinal },
        });
      }
      return { proceed: true, status: run.status, superseded: false };
    });
  }

  /** Runs a deploy stage's action against its target: a command over SSH, or an HTTP call. */
  async function runDeployAction(
    input: { runId: string; ordinal: number },
    control: { signal?: AbortSignal; onProgress?: () => void } = {},
  ): Promise<StageResult> {
    const run = await runById(db, input.runId);
    const flow = await runFlow(db, run);
    const stage = flow.stages[input.ordinal]!;
    const env = await stageEnvironment(db, run.project_id, stage.target);
    // The pinned flow carries the environments' URLs as they were at execute.
    const envUrl = run.pinned_flow ? run.pinned_flow.environment_urls[env.name] : env.url;
    const values = { candidate: run.candidate_sha, run_id: run.run_id, environment: env.name, url: envUrl ?? '' };
    const action = stage.action as DeployActionDefinition;
    if ('ssh' in action) {
      const host = await deployHostByName(db, run.project_id, action.ssh.host);
      try {
        const result = await runOverSsh(
          {
            name: host.name,
            role: 'deploy_host',
            host: host.host,
            port: host.port,
            user: host.ssh_user,
            privateKey: () => readCredential(host.credential, ssh.keyDir),
            hostKey: host.host_key,
          },
          fill(action.ssh.command, values),
          { ...ssh, ...control },
        );
        const output = `${result.stdout}${result.stderr ? `\n[stderr]\n${result.stderr}` : ''}`.slice(-DETAIL_CHARS);
        const ok = result.exit_code === 0 && !result.timed_out;
        return {
          ok,
          detail: `${ok ? 'ok' : result.timed_out ? 'timed out' : `exit status ${result.exit_code}`} on ${host.name}: ${output.trim()}`,
        };
      } catch (err) {
        if (err instanceof SshUnavailable) return { ok: false, detail: `ssh_unavailable: ${err.message}` };
        // host_key_mismatch, credential_unknown: the stage failed for a named reason.
        if (err instanceof YokeError) return { ok: false, detail: `${err.code}: ${err.message} (${err.recovery})` };
        throw err;
      }
    }
    const url = fill(action.http.url, values);
    const timeout = AbortSignal.timeout(ssh.commandTimeoutMs);
    const beat = control.onProgress ? setInterval(control.onProgress, 2_000) : undefined;
    try {
      const response = await fetch(url, {
        method: action.http.method,
        body: action.http.body ? fill(action.http.body, values) : undefined,
        signal: control.signal ? AbortSignal.any([control.signal, timeout]) : timeout,
      });
      const body = (await response.text()).slice(0, DETAIL_CHARS);
      const ok = response.status === action.http.expect_status;
      return {
        ok,
        detail: `${action.http.method} ${url} -> ${response.status}${ok ? '' : ` (expected ${action.http.expect_status})`}: ${body.trim()}`,
      };
    } catch (err) {
      if (control.signal?.aborted) throw err;
      // fetch says only "fetch failed"; the cause (ECONNREFUSED, ENOTFOUND, a timeout) is what the driver needs
      const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause;
      const why = cause ? ` (${cause.code ?? cause.message ?? String(cause)})` : '';
      return { ok: false, detail: `${action.http.method} ${url} failed: ${(err as Error).message}${why}` };
    } finally {
      clearInterval(beat);
    }
  }

  /**
   * What a waiting QA or approval stage reads: the run's status (a run ended elsewhere ends the
   * wait, whatever the stage), and the stage's outcome once there is one.
   */
  async function stageWait(input: {
    runId: string;
    ordinal: number;
  }): Promise<{ run_status: string; result: StageResult | null }> {
    const run = await runById(db, input.runId);
    const stage = (await runFlow(db, run)).stages[input.ordinal]!;
    if (run.status !== 'executing') return { run_status: run.status, result: null };
    if (stage.kind === 'qa') {
      const { pending, failed } = await stageOutstanding(db, run.run_id, stage.name);
      if (failed.length)
        return { run_status: run.status, result: { ok: false, detail: `blocking QA failed: ${failed.join(', ')}` } };
      return { run_status: run.status, result: pending.length ? null : { ok: true, detail: 'qa stage passed' } };
    }
    const approval = await stageApproval(db, input.runId, input.ordinal);
    const detail = approval ? (approval.detail ?? `approved by ${approval.approved_by_actor_id}`) : null;
    return { run_status: run.status, result: detail ? { ok: true, detail } : null };
  }

  /** Records a stage's end (by the walk that owns the run); a passed QA stage may end the run's occupancy (O1). */
  async function finishStage(input: {
    runId: string;
    ordinal: number;
    walk: number;
    result: StageResult;
  }): Promise<void> {
    await db.transaction().execute(async (trx) => {
      const run = await runById(trx, input.runId, { lock: true });
      if (run.walk !== input.walk) return;
      await endStage(trx, input.runId, input.ordinal, input.result);
      await releaseOccupancyIfSettled(trx, input.runId);
    });
  }

  /** A stage failed: the run fails with its O4 retractions and releases its origins. */
  async function failRun(input: { runId: string; walk: number; reason: string }): Promise<{ status: string }> {
    const ends = {
      lifetimeMs: deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS,
      effects: noEffects(),
      qa: noQaEffects(),
    };
    const result = await db.transaction().execute(async (trx) => {
      const run = await runById(trx, input.runId, { lock: true });
      if (run.status !== 'executing' || run.walk !== input.walk) return { status: run.status };
      await markTerminal(trx, run, 'failed', input.reason, null, ends);
      return { status: 'failed' };
    });
    await notifyLine(deps.line?.notifier, ends.effects);
    await notifyQa(deps.qaNotifier, ends.qa);
    return result;
  }

  /** Q4: the blocking obligations still unresolved; the run's completing stage waits while any is. */
  async function blockingQaHold(input: { runId: string }): Promise<{ unresolved: string[] }> {
    return { unresolved: await blockingQaUnresolved(db, input.runId) };
  }

  /** A run-level QA verdict (the minimum QA stages need until QA plan executions arrive). */
  async function recordQaVerdict(input: {
    sessionId: string;
    runId: string;
    checkName: string;
    status: 'passed' | 'failed' | 'waived';
  }) {
    await requireLiveSession(db, input.sessionId);
    const run = await runById(db, input.runId);
    // R1: any verdict on the run's QA (passed, failed or waived) is the driver's or the
    // steering seat's call, as on a plan execution (run_driven_elsewhere names the driver).
    await requireRunAuthority(
      db,
      run,
      input.sessionId,
      freshMs,
      `${input.status === 'waived' ? 'waive' : `record ${input.status} on`} QA check ${input.checkName}`,
    );
    if (run.status === 'succeeded' || run.status === 'cancelled') {
      throw qaClosedRefusal(run, {
        live: 'record verdicts on a live run',
        onSuccessor: (next) =>
          `record it on the successor: yoke deployment-runs qa-verdict ${next} --check ${input.checkName} --status ${input.status}`,
      });
    }
    const row = await recordRunQaVerdict(db, input.runId, input.checkName, input.status);
    if (!row) {
      const known = await openQaCheckNames(db, input.runId);
      throw refusal('qa_check_not_found', `run ${input.runId} has no open QA check ${input.checkName}`, {
        recovery: `name one of: ${known.join(', ') || '(none)'}`,
        details: { run_id: input.runId, check_name: input.checkName },
      });
    }
    return {
      run_id: row.run_id,
      check_name: row.check_name,
      status: row.status,
      stage_name: row.stage_name,
      updated_at: row.updated_at.toISOString(),
    };
  }

  /** Records a human approval of a waiting approval stage. */
  async function approveStage(input: { sessionId: string; runId: string; stage: string }) {
    const run = await runById(db, input.runId);
    // R1: only the live driver or a steering seat approves, and only a stage the run reached.
    const session = await requireRunAuthority(db, run, input.sessionId, freshMs, `approve stage ${input.stage}`);
    // A run not yet executing has no stage rows: its flow's declared stage has not been reached either.
    const reached =
      (await stageByName(db, input.runId, input.stage)) ??
      (await runFlow(db, run)).stages
        .filter((s) => s.name === input.stage)
        .map((s) => ({ kind: s.kind, status: 'pending' }))[0];
    if (reached?.kind === 'approval' && reached.status === 'pending') {
      throw refusal(
        'approval_stage_not_reached',
        `run ${input.runId} has not reached approval stage ${input.stage}; an approval counts only once its stage waits for it`,
        {
          recovery: `approve when the stage waits: yoke deployment-runs watch ${input.runId}`,
          details: { run_id: input.runId, stage: input.stage, status: reached.status },
        },
      );
    }
    const row = await recordApproval(db, input.runId, input.stage, {
      actorId: session.actor_id,
      sessionId: session.session_id,
      detail: `approved by ${session.actor_id} (session ${session.session_id})`,
    });
    if (!row) {
      // An approval stage that no longer waits (approved already, or the run moved past it) is a
      // refusal of a well-formed request (exit 1); naming no approval stage is a usage error.
      const settled = reached?.kind === 'approval';
      throw (settled ? refusal : usageError)(
        'stage_not_awaiting_approval',
        settled
          ? `run ${input.runId}'s approval stage ${input.stage} is ${reached.status}; nothing awaits approval there`
          : `run ${input.runId} has no approval stage ${input.stage} awaiting approval`,
        {
          recovery: `see the stages: yoke deployment-runs get ${input.runId} stages`,
          details: { run_id: input.runId, stage: input.stage, ...(settled ? { status: reached.status } : {}) },
        },
      );
    }
    return { run_id: row.run_id, stage: row.name, ordinal: row.ordinal, approved_by: session.actor_id };
  }

  return {
    loadRunPlan,
    runStatus,
    beginStage,
    runDeployAction,
    stageWait,
    finishStage,
    failRun,
    blockingQaHold,
    recordQaVerdict,
    approveStage,
  };
}

export type RunStageActivities = ReturnType<typeof runStageActivities>;
