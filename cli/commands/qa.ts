import { isInterruption, qaBeginCommand } from '../../domain/qaPlan';
import type { Command } from 'commander';
import { z } from 'zod';
import type { BeginResult, ExecutionView, StrandedWait, UnhealthyLine } from '../../activities/qa/executions';
import type { qaPlanExecution } from '../../workflows/qaPlanExecution';
import {
  actingSession,
  BaseOptions,
  commandAction,
  type CommandContext,
  decimalIdSchema,
  nonEmpty,
  parseArgument,
  parseOptions,
  withDb,
  WatchOptions,
} from '../context';
import { unreachable, YokeError } from '../../domain/errors';
import { readThroughOutage } from '../outage';
import { table, warn } from '../output';

const ExecutionId = decimalIdSchema('an execution id');

async function qa(ctx: CommandContext) {
  const { qaExecutionActivities } = await import('../../activities/qa/executions');
  return qaExecutionActivities({
    db: ctx.db,
    line: ctx.line,
    ssh: ctx.config.ssh,
    driverFreshMs: await ctx.driverFreshMs(),
    qaNotifier: ctx.temporal.qaNotifier(),
  });
}

function executionIdOf(raw: string): number {
  return parseArgument('execution', ExecutionId, raw);
}

/** T3: a case's verdict; one a takeover carried over credits the run that recorded it (get and watch alike). */
function verdictText(v: ExecutionView, s: ExecutionView['steps'][number]): string {
  return s.verdict && s.verdict_run_id && s.verdict_run_id !== v.run_id
    ? `${s.verdict} (under ${s.verdict_run_id})`
    : (s.verdict ?? 'pending');
}

function stepsTable(v: ExecutionView): string {
  return table(
    ['#', 'CASE', 'KIND', 'MACHINE', 'VERDICT', 'OBSERVED', 'NOTE'],
    v.steps.map((s) => [
      s.ordinal,
      s.name,
      s.kind,
      s.test_machine,
      verdictText(v, s),
      s.observed_commit ? `${s.observed_commit.slice(0, 12)} (${s.revision_check})` : s.revision_check,
      s.note,
    ]),
  );
}

/**
 * Issue 10 / W3: each time a case gave its machine back and ran again (its command reported no
 * result, or SSH failed), as its wait in the machine's line records it, oldest first: --json
 * shows these waits whatever their state, so the text does too.
 */
function interruptionLines(v: ExecutionView): string[] {
  return v.waits
    .filter((w) => isInterruption(w.rationale))
    .sort((a, b) => a.wait_id - b.wait_id)
    .map((w) => `interrupted at ${w.queued_at}: ${w.rationale} (its place in ${w.test_machine}'s line: ${w.state})`);
}

function strandedText(v: ExecutionView, stranded: StrandedWait): string {
  return `its place in ${stranded.test_machine}'s line was cancelled when session ${v.session_id} ended: nothing will wake it`;
}

function unhealthyText(u: UnhealthyLine): string {
  return `${u.test_machine} is unhealthy${u.reason ? ` (${u.reason})` : ''}: nothing serves its line but a successful verify: ${u.recovery}`;
}

function executionText(v: ExecutionView): string {
  const id = v.deployment_start_identity;
  const stranded = v.stranded;
  return [
    `QA plan execution ${v.execution_id}: run ${v.run_id}, stage ${v.stage}, plan ${v.plan_id}${v.item ? `, item ${v.item}` : ''}`,
    `status ${v.status}${v.release_reason ? ` (${v.release_reason})` : ''}; session ${v.session_id}`,
    ...(stranded ? [`${strandedText(v, stranded)}; ${stranded.recovery}`] : []),
    `target ${id.target} (${id.target_url ?? 'no url'}${id.served_revision_path}); delivered ${id.delivered_commit}; served ${v.served_revision.observed_commit ?? '?'} (${v.served_revision.revision_check})`,
    ...v.waits
      .filter((w) => w.state === 'waiting' || w.state === 'reserved')
      .map((w) => `in line for ${w.test_machine}: ${w.state}${w.position ? ` at position ${w.position}` : ''}`),
    ...(v.unhealthy_machine ? [unhealthyText(v.unhealthy_machine)] : []),
    ...interruptionLines(v),
    stepsTable(v),
  ].join('\n');
}

/** A repeat (its first answer lost) says the case was already recorded, and what the execution became since. */
function alreadyRecorded(r: { recorded: boolean; recorded_at: string; execution_status: string }): string {
  if (r.recorded) return '';
  return `; already recorded at ${r.recorded_at}, nothing written${r.execution_status === 'running' ? '' : `; the execution has ended ${r.execution_status}`}`;
}

/** Q2: a different build or an unanswerable target is said on stderr; QA proceeds either way. */
function revisionWarning(r: {
  deployment_start_identity: { target: string; delivered_commit: string };
  served_revision: { revision_check: string; observed_commit: string | null; detail: string | null };
}): string | null {
  const id = r.deployment_start_identity;
  if (r.served_revision.revision_check === 'mismatch')
    return `warning: served_revision_mismatch: target ${id.target} serves ${r.served_revision.observed_commit}, but the run delivered ${id.delivered_commit}; QA proceeds against what is deployed`;
  if (r.served_revision.revision_check === 'unverified')
    return `warning: served_revision_unverified: target ${id.target} could not be asked what it serves (${r.served_revision.detail}); the run delivered ${id.delivered_commit}`;
  return null;
}

/**
 * `qa begin` after its execution's row committed but its workflow could not start: the execution
 * is aborted (its release reason names why) and the error says so, with the begin to run again.
 */
async function notStarted(
  acts: Awaited<ReturnType<typeof qa>>,
  sessionId: string,
  begun: BeginResult,
  err: unknown,
): Promise<YokeError> {
  const why = (err as Error).message;
  await acts.abortExecution({
    sessionId,
    executionId: begun.execution_id,
    reason: `workflow_not_started: ${why}`.slice(0, 500),
  });
  return new YokeError(
    err instanceof YokeError ? err.kind : 'unreachable',
    'qa_execution_not_started',
    `execution ${begun.execution_id} was begun but its workflow ${begun.workflow_id} could not start (${why}); it is aborted, so nothing is left half-begun`,
    `once Temporal accepts workflows again, begin anew: ${qaBeginCommand(begun)}`,
    { execution_id: begun.execution_id, workflow_id: begun.workflow_id },
  );
}

/** How often `qa watch` asks Temporal whether the execution's workflow still runs. */
const WORKFLOW_CHECK_EVERY_MS = 5_000;
/**
 * A workflow found not running is asked about again this soon (the execution re-read between),
 * and once more when --timeout runs out: a short --timeout names the way out, not "it goes on".
 */
const CONFIRM_AFTER_MS = 2_000;

/**
 * Issue 10, as `deployment-runs watch` does for a run: a running execution whose workflow is not
 * running (twice in a row, the execution re-read between) never moves on: exit 3 naming the way
 * out. Temporal out of reach is not that: the record in Postgres is still followed.
 */
function executionWorkflowHealth(ctx: CommandContext, executionId: number, json: boolean) {
  let notRunning = 0;
  let workerless = false;
  /** True when the workflow was found not running once: the caller confirms it soon. */
  return async (v: ExecutionView): Promise<boolean> => {
    const { qaExecutionWorkflowId } = await import('../../workflows/definitions');
    const workflowId = qaExecutionWorkflowId(executionId);
    let workflowStatus: string | null;
    try {
      workflowStatus = (await (await ctx.temporal.get()).workflow.getHandle(workflowId).describe()).status.name;
    } catch (err) {
      const { WorkflowNotFoundError } = await import('@temporalio/client');
      if (!(err instanceof WorkflowNotFoundError)) return false;
      workflowStatus = null;
    }
    if (workflowStatus === 'RUNNING') {
      notRunning = 0;
      // as deployment-runs watch says it: a running workflow with no worker waits, said once
      const polled = await ctx.temporal.hasWorker().catch(() => true);
      if (!polled && !workerless) {
        const message = `no yoke worker has polled task queue "${ctx.config.taskQueue}" recently: the execution waits until one runs (npm start)`;
        process.stdout.write(
          json ? `${JSON.stringify({ execution_id: executionId, worker: 'none', message })}\n` : `${message}\n`,
        );
      }
      workerless = !polled;
      return false;
    }
    if (++notRunning < 2) return true;
    const state = workflowStatus === null ? 'does not exist' : `is ${workflowStatus.toLowerCase()}`;
    throw unreachable(
      'execution_workflow_not_running',
      `execution ${executionId} is running but its workflow ${workflowId} ${state}: nothing moves it on`,
      {
        recovery: `end it: yoke qa abort ${executionId} --reason "workflow lost", then begin again: ${qaBeginCommand(v)}`,
        details: { execution_id: executionId, workflow_id: workflowId, workflow_status: workflowStatus },
      },
    );
  };
}

export function registerQa(program: Command): void {
  const q = program.command('qa').description('QA plan executions: begin, record verdicts, waive, abort, follow');

  q.command('begin')
    .description("start a QA plan execution at a run's QA stage (Q1, Q2); its workflow walks the plan")
    .requiredOption('--run <run>', 'deployment run')
    .requiredOption('--stage <stage>', 'QA stage of the run')
    .requiredOption('--plan <plan>', 'QA plan id')
    .option('--item <PREFIX-N>', 'the member this execution answers (item-scoped QA)')
    .action(
      commandAction(
        BaseOptions.extend({ run: nonEmpty, stage: nonEmpty, plan: nonEmpty, item: nonEmpty.optional() }),
        async (ctx, o) => {
          const sessionId = actingSession(o);
          // Temporal must answer before the execution exists, so no execution is left without its workflow.
          const client = await ctx.temporal.get();
          if (!(await ctx.temporal.hasWorker()))
            warn(
              !!o.json,
              `warning: no yoke worker polls task queue "${ctx.config.taskQueue}"; the execution waits until one starts`,
            );
          const acts = await qa(ctx);
          const begun = await acts.beginExecution({
            sessionId,
            runId: o.run,
            stage: o.stage,
            plan: o.plan,
            item: o.item,
          });
          const { qaExecutionWorkflowId } = await import('../../workflows/definitions');
          try {
            await client.workflow.start<typeof qaPlanExecution>('qaPlanExecution', {
              workflowId: qaExecutionWorkflowId(begun.execution_id),
              taskQueue: ctx.config.taskQueue,
              args: [{ executionId: begun.execution_id, runId: begun.run_id, steps: begun.steps }],
            });
          } catch (err) {
            // Nothing half-written: an execution whose workflow never started would hold its
            // place in QA with nothing to walk it, so it ends here, named, before the error is told.
            throw await notStarted(acts, sessionId, begun, err);
          }
          const warning = revisionWarning(begun);
          if (warning) process.stderr.write(`${warning}\n`);
          for (const w of begun.warnings) warn(!!o.json, `warning: ${w}`);
          for (const other of begun.also_running)
            warn(
              !!o.json,
              `warning: you already run execution ${other.execution_id} of plan ${begun.plan_id} at ${begun.stage} (begun ${other.began_at}); if this begin repeats one whose answer was lost, follow that one (yoke qa watch ${other.execution_id}) and end this one: yoke qa abort ${begun.execution_id} --reason "begun twice"`,
            );
          return begun;
        },
        (r) =>
          `began QA plan execution ${r.execution_id} (${r.workflow_id}): plan ${r.plan_id} at ${r.stage} of ${r.run_id}${r.item ? ` for ${r.item}` : ''}\n` +
          `target ${r.deployment_start_identity.target}, delivered ${r.deployment_start_identity.delivered_commit}, served ${r.served_revision.observed_commit ?? '?'} (${r.served_revision.revision_check})\n` +
          `follow it: yoke qa watch ${r.execution_id}`,
      ),
    );

  q.command('verdict')
    .description(
      'record a human verdict on a manual case or the gate (written under your role; its workflow is woken to read it)',
    )
    .argument('<execution>', 'execution id')
    .requiredOption('--case <case>', 'case name')
    .requiredOption('--verdict <verdict>', 'passed | failed')
    .option('--note <text>', 'a note kept with the verdict')
    .option('--run <run>', 'the run you mean (refused qa_execution_wrong_run when it is another)')
    .action(
      commandAction(
        BaseOptions.extend({
          case: nonEmpty,
          verdict: z.enum(['passed', 'failed']),
          note: z.string().optional(),
          run: nonEmpty.optional(),
        }),
        async (ctx, o, [rawId]) => {
          const executionId = executionIdOf(rawId!);
          const sessionId = actingSession(o);
          // Issue 13: written here under the caller's role (R1 in Postgres); the workflow is only nudged to read it.
          const request = { executionId, case: o.case, verdict: o.verdict, note: o.note, sessionId, runId: o.run };
          const r = await (await qa(ctx)).recordHumanVerdict(request);
          for (const w of r.warnings) warn(!!o.json, `warning: ${w}`);
          return r;
        },
        (r) =>
          `execution ${r.execution_id} case ${r.case}: ${r.verdict} (served ${r.observed_commit ?? '?'}, ${r.revision_check})${alreadyRecorded(r)}`,
      ),
    );

  q.command('waive')
    .description("waive a case (R1: the run's live driver, else a steering seat on its project)")
    .argument('<execution>', 'execution id')
    .requiredOption('--case <case>', 'case name')
    .requiredOption('--reason <text>', 'why')
    .action(
      commandAction(
        BaseOptions.extend({ case: nonEmpty, reason: nonEmpty }),
        async (ctx, o, [rawId]) => {
          const r = await (
            await qa(ctx)
          ).waiveExecutionCase({
            executionId: executionIdOf(rawId!),
            case: o.case,
            reason: o.reason,
            sessionId: actingSession(o),
          });
          for (const w of r.warnings) warn(!!o.json, `warning: ${w}`);
          return r;
        },
        (r) => `execution ${r.execution_id} case ${r.case}: waived${alreadyRecorded(r)}`,
      ),
    );

  q.command('abort')
    .description('end an execution: its waits are cancelled and its lease released in one transaction (W9)')
    .argument('<execution>', 'execution id')
    .requiredOption('--reason <text>', 'why')
    .action(
      commandAction(
        BaseOptions.extend({ reason: nonEmpty }),
        async (ctx, o, [rawId]) => {
          const executionId = executionIdOf(rawId!);
          const r = await (
            await qa(ctx)
          ).abortExecution({ sessionId: actingSession(o), executionId, reason: o.reason });
          for (const w of r.warnings) warn(!!o.json, `warning: ${w}`);
          return r;
        },
        (r) =>
          `execution ${r.execution_id} ${r.replayed ? 'was already aborted (nothing written)' : 'aborted'}: ${r.release_reason}`,
      ),
    );

  q.command('get')
    .description('an execution: identity, served revision, each case with the commit it observed, its waits')
    .argument('<execution>', 'execution id')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, _o, [rawId]) => (await qa(ctx)).getExecution({ executionId: executionIdOf(rawId!) }),
        executionText,
      ),
    );

  q.command('watch')
    .description('follow an execution case by case until it ends (exit 0 if it passed)')
    .argument('<execution>', 'execution id')
    .option('--interval-ms <ms>', 'how often to read', '500')
    .option('--timeout <seconds>', 'stop watching (exit 3) after this long', '86400')
    .option('--json', 'print JSON lines')
    .action(async (rawId: string, raw) => {
      const id = executionIdOf(rawId);
      const o = parseOptions(WatchOptions, raw);
      const status = await withDb(async (ctx) => {
        const acts = await qa(ctx);
        const health = executionWorkflowHealth(ctx, id, !!o.json);
        // A runner watching its execution is alive: its session (and the execution's waits) stay.
        const stopHeartbeat = await (await import('../sessionKeepAlive')).keepWatcherAlive(ctx, o.session);
        const started = Date.now();
        let checked = 0;
        let suspect = false;
        const seen = new Map<string, string>();
        let lastWaiting = '';
        let lastUnhealthy = '';
        let lastAwaiting = '';
        try {
          for (;;) {
            // A Postgres outage pauses the watch (the execution goes on) instead of ending it.
            const v = await readThroughOutage(
              () => acts.getExecution({ executionId: id }),
              (message) => warn(!!o.json, message),
            );
            for (const s of v.steps) {
              const key = s.verdict ?? '';
              if (!key || seen.get(s.name) === key) continue;
              seen.set(s.name, key);
              if (o.json)
                process.stdout.write(
                  `${JSON.stringify({ execution_id: id, case: s.name, kind: s.kind, verdict: s.verdict, observed_commit: s.observed_commit, revision_check: s.revision_check, verdict_run_id: s.verdict_run_id })}\n`,
                );
              else
                process.stdout.write(
                  `${String(s.ordinal + 1).padStart(2)}/${v.steps.length} ${s.name.padEnd(20)} ${s.kind.padEnd(10)} ${verdictText(v, s)}  served ${s.observed_commit ?? '?'} (${s.revision_check})\n`,
                );
            }
            const waiting = v.waits
              .filter((w) => w.state === 'waiting')
              .map((w) => `waiting for ${w.test_machine} at position ${w.position}`)
              .join('; ');
            if (waiting !== lastWaiting && !o.json && waiting) process.stdout.write(`${waiting}\n`);
            lastWaiting = waiting;
            // W8: a line nothing serves until someone verifies the machine says so, once, and how.
            const unhealthy = v.unhealthy_machine ? unhealthyText(v.unhealthy_machine) : '';
            if (unhealthy && unhealthy !== lastUnhealthy)
              process.stdout.write(
                o.json
                  ? `${JSON.stringify({ execution_id: id, waiting_for: v.unhealthy_machine!.test_machine, unhealthy: true, reason: v.unhealthy_machine!.reason, recovery: v.unhealthy_machine!.recovery })}\n`
                  : `${unhealthy}\n`,
              );
            lastUnhealthy = unhealthy;
            // A case that only a person can answer says so, and how, once: else the watch looks stuck.
            // The plan runs in order: its first unrecorded step is the one it is at.
            const current = [...v.steps].sort((a, b) => a.ordinal - b.ordinal).find((s) => !s.verdict);
            const awaiting =
              v.status === 'running' && current && (current.kind === 'manual' || current.kind === 'gate')
                ? current
                : undefined;
            if (awaiting && awaiting.name !== lastAwaiting) {
              const how = `yoke qa verdict ${id} --case ${awaiting.name} --verdict passed|failed`;
              process.stdout.write(
                o.json
                  ? `${JSON.stringify({ execution_id: id, case: awaiting.name, kind: awaiting.kind, awaiting: 'verdict', recovery: how })}\n`
                  : `${String(awaiting.ordinal + 1).padStart(2)}/${v.steps.length} ${awaiting.name.padEnd(20)} ${awaiting.kind.padEnd(10)} awaits a verdict: ${how}\n`,
              );
            }
            lastAwaiting = awaiting?.name ?? '';
            // W9, issue 10: its wait was cancelled with its session and nothing will wake it, so the
            // watch ends now (exit 3) naming the way out, as for a workflow that is not running.
            const stranded = v.stranded;
            if (stranded)
              throw unreachable('execution_stranded', `execution ${id}: ${strandedText(v, stranded)}`, {
                recovery: stranded.recovery,
                details: { execution_id: id, test_machine: stranded.test_machine, cancel_reason: 'session_ended' },
              });
            if (v.status !== 'running') {
              if (o.json)
                process.stdout.write(
                  `${JSON.stringify({ execution_id: id, status: v.status, release_reason: v.release_reason })}\n`,
                );
              else
                process.stdout.write(
                  `execution ${id} ${v.status}${v.release_reason ? ` (${v.release_reason})` : ''}\n`,
                );
              return v.status;
            }
            // Issue 10: every CLI wait is bounded, and one on an execution nothing moves on says so.
            const since = Date.now() - checked;
            if (since >= WORKFLOW_CHECK_EVERY_MS || (suspect && since >= CONFIRM_AFTER_MS)) {
              checked = Date.now();
              suspect = await health(v);
            }
            if (Date.now() - started > o.timeout * 1000) {
              // a workflow found missing is confirmed now (the execution was re-read since that look)
              if (suspect) await health(v);
              throw unreachable(
                'wait_timeout',
                `execution ${id} did not end within ${Math.round(o.timeout)} s of watching`,
                {
                  // W8: it does not go on by itself in an unhealthy machine's line.
                  recovery: v.unhealthy_machine
                    ? `${v.unhealthy_machine.recovery}, then yoke qa watch ${id} again`
                    : `it goes on without you: yoke qa watch ${id} again, or --timeout SECONDS`,
                  details: { execution_id: id, status: v.status },
                },
              );
            }
            // never past --timeout: the last read comes when the time is up, not an interval later
            const left = o.timeout * 1000 - (Date.now() - started);
            await new Promise((r) => setTimeout(r, Math.max(0, Math.min(o.intervalMs, left + 1))));
          }
        } finally {
          await stopHeartbeat();
        }
      });
      if (status !== 'passed') process.exitCode = 1;
    });
}
