import { executeRunCommand, isTerminalRunStatus } from '../domain/runStatuses';
import type { DeploymentRunActivities } from '../activities/deploymentRuns';
import type { RunView } from '../activities/runs/read';
import type { CommandContext } from './context';
import { keepWatcherAlive } from './sessionKeepAlive';
import { readThroughOutage } from './outage';
import { warn } from './output';
import { unreachable } from '../domain/errors';
import { failedQaRecovery } from '../domain/qaStages';
import { failingEffectsText } from '../domain/settlementEffects';

function stamp(): string {
  return new Date().toISOString().slice(11, 19);
}

/** How often watch asks Temporal whether the run's workflow runs and a worker polls. */
const HEALTH_EVERY_MS = 5_000;
/**
 * A workflow found not running is asked about again this much later, not HEALTH_EVERY_MS: long
 * enough for a run just committed executing to have started its workflow, short enough for a
 * brief --timeout to name the repair.
 */
const CONFIRM_AFTER_MS = 2_000;

/**
 * What stops an executing run from moving on, as Temporal sees it: no running workflow (it
 * would never move again: exit 3 naming the repair), or no worker polling recently (it waits
 * for one: said once, the watch goes on). Temporal out of reach is said once too; the record
 * in Postgres is still followed.
 */
function workflowHealth(ctx: CommandContext, runId: string, json: boolean) {
  let lastNote = '';
  let notRunning = 0;
  const note = (text: string, data: object) => {
    if (text === lastNote) return;
    lastNote = text;
    if (json) process.stdout.write(`${JSON.stringify({ at: new Date().toISOString(), run_id: runId, ...data })}\n`);
    else process.stdout.write(`${stamp()}  ${text}\n`);
  };
  return async (): Promise<boolean> => {
    let described;
    try {
      const { describeRunWorkflow } = await import('../temporal/runWorkflows');
      described = await describeRunWorkflow(await ctx.temporal.get(), runId);
    } catch (err) {
      note(`cannot reach Temporal (${(err as Error).message.split('\n')[0]}); following the record only`, {
        workflow: 'unknown',
      });
      return false;
    }
    if (described.status !== 'RUNNING') {
      const state = described.status === null ? 'does not exist' : `is ${described.status.toLowerCase()}`;
      // Twice in a row, the run re-read between: a run that just ended has closed its workflow too.
      if (++notRunning >= 2) {
        throw unreachable(
          'run_workflow_not_running',
          `run ${runId} is executing but its workflow ${described.workflow_id} ${state}: nothing moves it on`,
          {
            recovery: `yoke deployment-runs repair ${runId} (the sweep's reconciler does the same), then watch again`,
            details: { run_id: runId, workflow_id: described.workflow_id, workflow_status: described.status },
          },
        );
      }
      return true; // suspect: confirmed CONFIRM_AFTER_MS later, not HEALTH_EVERY_MS
    }
    notRunning = 0;
    if (!(await ctx.temporal.hasWorker())) {
      note(
        `no yoke worker has polled task queue "${ctx.config.taskQueue}" recently: the run waits until one runs (npm start)`,
        { workflow: 'running', worker: 'none' },
      );
    } else if (lastNote) {
      // said once the trouble above passes, so a reader of the lines knows the run can move again
      note(`Temporal answers and a yoke worker polls task queue "${ctx.config.taskQueue}" again: the run goes on`, {
        workflow: 'running',
        worker: 'polling',
      });
    }
    return false;
  };
}

/**
 * What the watcher does next, where the run cannot move on by itself: a created run waits to be
 * executed; a taken-over run continues as its successor; a blocking obligation recorded failed fails its QA stage, retry after retry, until a
 * new verdict replaces it (failedQaRecovery). Null otherwise.
 */
function nextStep(view: RunView): string | null {
  if (view.status === 'created') return executeRunCommand(view.run_id);
  // T2: a taken-over run's work goes on under its successor, which the watcher follows next
  if (view.superseded_by_run_id)
    return `taken over by ${view.superseded_by_run_id}, which carries its members and QA: yoke deployment-runs watch ${view.superseded_by_run_id}`;
  return failedQaRecovery(view, view.qa, view.stages) ?? view.recovery;
}

/**
 * `deployment-runs watch`: reads the run from Postgres (the record) and prints each change
 * as it happens: one line per stage transition in a terminal, one JSON object per change
 * with --json. Returns the final status. Run as a session, it keeps that session alive.
 */
export async function watchRun(
  ctx: CommandContext,
  runs: DeploymentRunActivities,
  runId: string,
  opts: { json: boolean; intervalMs: number; timeoutMs: number; session?: string },
): Promise<string> {
  const stopHeartbeat = await keepWatcherAlive(ctx, opts.session);
  try {
    return await followRun(ctx, runs, runId, opts);
  } finally {
    await stopHeartbeat();
  }
}

async function followRun(
  ctx: CommandContext,
  runs: DeploymentRunActivities,
  runId: string,
  opts: { json: boolean; intervalMs: number; timeoutMs: number },
): Promise<string> {
  const seen = new Map<number, string>();
  const health = workflowHealth(ctx, runId, opts.json);
  const started = Date.now();
  let checked = 0;
  let suspect = false; // the last check found no running workflow: asked again CONFIRM_AFTER_MS later
  let lastStatus = '';
  let lastLines = '';
  let lastFailing = '';
  for (;;) {
    // A Postgres outage pauses the watch (the run goes on in Postgres) instead of ending it.
    const view = (await readThroughOutage(
      () => runs.getRun({ runId }),
      (message) => warn(opts.json, `${stamp()}  ${message}`),
    )) as RunView;
    const changes: string[] = [];
    for (const s of view.stages) {
      const key = `${s.status}|${s.detail ?? ''}`;
      if (seen.get(s.ordinal) === key) continue;
      if (!(seen.get(s.ordinal) === undefined && s.status === 'pending')) {
        // An approval stage waits for a person: say who acts, and how (not again once approved:
        // an approval recorded while no worker ran reads waiting until the run takes it).
        const approve =
          s.kind === 'approval' && s.status === 'waiting' && !s.approved_by_actor_id
            ? `  approve with: yoke deployment-runs approve ${view.run_id} --stage ${s.name}`
            : '';
        changes.push(
          `${stamp()}  ${String(s.ordinal + 1).padStart(2)}/${view.stages.length} ${s.name.padEnd(20)} ${s.kind.padEnd(8)} ${s.status}${s.detail && s.status !== 'running' ? `  ${s.detail.split('\n')[0]!.slice(0, 100)}` : ''}${approve}`,
        );
      }
      seen.set(s.ordinal, key);
    }
    const lines = view.occupancy.open_lines.join('; ');
    // S3: a failing effect keeps the run settling: said when it fails, and again if what fails changes
    const failing = view.settling ? failingEffectsText(view.settlement.effects) : '';
    // S1: a settling run is still executing; watch shows the phase, and ends only at a terminal status.
    const status = view.settling ? 'settling' : view.status;
    if (status !== lastStatus || changes.length || lines !== lastLines || failing !== lastFailing) {
      const next = nextStep(view);
      if (opts.json) {
        process.stdout.write(
          `${JSON.stringify({ at: new Date().toISOString(), run_id: view.run_id, status: view.status, settling: view.settling, settlement_blocked: view.settlement.blocked, settlement_effects_failing: failing || null, current_stage: view.current_stage, cursor_ordinal: view.cursor_ordinal, open_lines: view.occupancy.open_lines, stages: view.stages.map((s) => ({ name: s.name, kind: s.kind, status: s.status })), waiting_for: view.status === 'created' ? 'execute' : null, recovery: next })}\n`,
        );
      } else {
        const blocked = view.settling && view.settlement.blocked ? `: ${String(view.settlement.blocked.message)}` : '';
        // A created run moves only once someone executes it: said with the status, not left silent.
        const waiting = view.status === 'created' ? ': waiting to be executed' : '';
        const statusLine =
          status !== lastStatus
            ? `${stamp()}  run ${view.run_id} ${status}${view.terminal_reason ? ` (${view.terminal_reason})` : ''}${blocked}${waiting}\n${next ? `${stamp()}  next: ${next}\n` : ''}`
            : '';
        // The run's start comes before its stages; its end after them.
        if (!isTerminalRunStatus(view.status)) process.stdout.write(statusLine);
        for (const c of changes) process.stdout.write(`${c}\n`);
        if (isTerminalRunStatus(view.status)) process.stdout.write(statusLine);
        // the next step goes with it unless the status line above has just said it
        if (failing && failing !== lastFailing)
          process.stdout.write(
            `${stamp()}  settlement effects failing: ${failing}\n${next && status === lastStatus ? `${stamp()}  next: ${next}\n` : ''}`,
          );
      }
      lastStatus = status;
      lastLines = lines;
      lastFailing = failing;
    }
    if (isTerminalRunStatus(view.status)) return view.status;
    if (view.status === 'executing') {
      // Q4: a run held before its completing stage is reported with every unresolved obligation.
      const { readBlockingQa } = await import('./blockingQa');
      const report = await readBlockingQa(ctx, runId, null, `yoke deployment-runs watch ${runId}`);
      if (report.held) {
        const { unresolvedLines } = await import('../activities/qa/pending');
        const unresolved = unresolvedLines(report);
        if (opts.json)
          process.stdout.write(
            `${JSON.stringify({ at: new Date().toISOString(), run_id: runId, status: 'held', completing_stage: report.completing_stage, unresolved, report })}\n`,
          );
        else {
          process.stdout.write(`${stamp()}  run ${runId} held by blocking QA before ${report.completing_stage}:\n`);
          for (const l of unresolved) process.stdout.write(`  ${l}\n`);
        }
        return 'held';
      }
    }
    const since = Date.now() - checked;
    if (view.status === 'executing' && (since >= HEALTH_EVERY_MS || (suspect && since >= CONFIRM_AFTER_MS))) {
      checked = Date.now();
      suspect = await health();
    }
    if (Date.now() - started > opts.timeoutMs) {
      // A workflow found missing is confirmed now rather than left to a timeout: the run was
      // re-read since that look, and "it will never move" is the answer the watcher needs.
      if (suspect && view.status === 'executing') await health();
      throw unreachable(
        'wait_timeout',
        `run ${runId} did not end within ${Math.round(opts.timeoutMs / 1000)} s of watching`,
        {
          recovery:
            view.status === 'created'
              ? `it waits to be executed: ${executeRunCommand(runId)}, then yoke deployment-runs watch ${runId} again`
              : `it goes on without you: yoke deployment-runs watch ${runId} again, or --timeout SECONDS`,
          details: { run_id: runId, status: view.status, current_stage: view.current_stage },
        },
      );
    }
    // never past --timeout: the last read comes when the time is up, not an interval later
    const left = opts.timeoutMs - (Date.now() - started);
    await new Promise((r) => setTimeout(r, Math.max(0, Math.min(opts.intervalMs, left + 1))));
  }
}
