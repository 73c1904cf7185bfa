import { RUN_STATUSES } from '../../domain/runStatuses';
import type { Command } from 'commander';
import { z } from 'zod';
import type { DeploymentRunActivities } from '../../activities/deploymentRuns';
import type { CreateReceipt } from '../../activities/runs/creation';
import type { ExecuteResult } from '../../activities/runs/execution';
import type { RunView } from '../../activities/runs/read';
import { YokeError } from '../../domain/errors';
import { failingEffectsText } from '../../domain/settlementEffects';
import {
  actingSession,
  BaseOptions,
  commandAction,
  nonEmpty,
  parseOptions,
  withDb,
  type CommandContext,
  WatchOptions,
} from '../context';
import { table, warn } from '../output';
import type { WorkflowHandle } from '@temporalio/client';
import type * as Definitions from '../../workflows/definitions';
import { registerArtifacts } from './artifacts';
import { registerRunQa } from './runQa';
import { executeNext, registerTakeover } from './takeover';

const collect = (value: string, previous: string[] = []) => [...previous, value];
const Selection = { requirementId: z.array(nonEmpty).default([]), planId: z.array(nonEmpty).default([]) };
const CreateOptions = BaseOptions.extend({
  project: nonEmpty,
  flow: nonEmpty,
  target: nonEmpty,
  candidate: nonEmpty,
  idempotencyKey: nonEmpty,
  item: z.array(nonEmpty).default([]),
  ...Selection,
});
const StartOptions = BaseOptions.extend({
  candidate: nonEmpty,
  flow: nonEmpty.optional(),
  target: nonEmpty.optional(),
  idempotencyKey: nonEmpty.optional(),
  ...Selection,
});

async function runs(ctx: CommandContext) {
  const { deploymentRunActivities } = await import('../../activities/deploymentRuns');
  return deploymentRunActivities({
    db: ctx.db,
    driverFreshMs: await ctx.driverFreshMs(),
    ssh: ctx.config.ssh,
    line: ctx.line,
    qaNotifier: ctx.temporal.qaNotifier(),
    takeoverNotifier: ctx.temporal.takeoverNotifier(),
    takeoverLockTimeoutMs: ctx.config.takeoverLockTimeoutMs,
  });
}

function receiptLine(r: CreateReceipt): string {
  const lines = [
    `${r.replayed ? 'replayed' : 'created'} run ${r.run_id}: ${r.project}/${r.flow} -> ${r.target} @ ${r.candidate_sha.slice(0, 12)} (${r.status})`,
    `members: ${r.member_items.length ? r.member_items.join(', ') : '(none: an environment-level deploy)'}`,
    `idempotency_basis: ${r.idempotency_basis ?? 'null'}`,
  ];
  for (const w of r.warnings) lines.push(`warning: ${w.message}`);
  if (r.takeover)
    lines.push(
      `took over run ${r.takeover.predecessor_run_id} (${r.takeover.moved_members.length} member(s), ${r.takeover.moved_qa.length} QA row(s), ${r.takeover.moved_executions.length} execution(s) moved)`,
    );
  for (const s of r.takeover_skipped ?? []) lines.push(`not taken over: run ${s.run_id}: ${s.reason}`);
  // D4 T3: the run that took over holds the occupancy and still owes its own walk, as takeover says.
  if (r.takeover) lines.push(executeNext(r.run_id));
  return lines.join('\n');
}

/**
 * I2: the CLI waits for a create (YOKE_CREATE_TIMEOUT_SECONDS, default 60 s), repeats it once
 * under the same key when it times out, and says so; a second timeout tells the user to
 * re-run the identical command.
 */
async function createWithRecovery(
  ctx: CommandContext,
  json: boolean,
  keyed: boolean,
  create: (activities: DeploymentRunActivities, timeoutMs: number) => Promise<CreateReceipt>,
): Promise<CreateReceipt & { recovered?: string }> {
  const activities = await runs(ctx);
  try {
    return await create(activities, ctx.config.createTimeoutMs);
  } catch (err) {
    if (!(err instanceof YokeError) || err.code !== 'deployment_run_create_timeout') throw err;
    // A timed-out create may still commit. Only a key makes repeating it safe: an unkeyed
    // start-for-item repeated made a second run, under a warning naming a key it never had.
    if (!keyed)
      throw new YokeError(
        err.kind,
        err.code,
        `${err.message}; it had no --idempotency-key, so it was not repeated, and the run may exist anyway`,
        'look before re-running, since a repeat without a key makes another run: yoke deployment-runs list (the newest first); next time pass --idempotency-key K, which makes a repeat return the same run',
        err.details,
      );
    try {
      const receipt = await create(activities, ctx.config.createTimeoutMs);
      const recovered = `deployment_run_create_timeout_recovered: the create timed out after ${ctx.config.createTimeoutMs} ms and was repeated once under the same key; it ${receipt.replayed ? 'found' : 'created'} run ${receipt.run_id}`;
      warn(json, `warning: ${recovered}`);
      return { ...receipt, recovered };
    } catch (again) {
      if (again instanceof YokeError && again.code === 'deployment_run_create_timeout') {
        throw new YokeError(
          again.kind,
          again.code,
          `the create timed out twice (${ctx.config.createTimeoutMs} ms each)`,
          're-run the identical command: its --idempotency-key returns the run once the create went through',
          again.details,
        );
      }
      throw again;
    }
  }
}

/** A receipt's JSON: a recovered timeout is one more warning. */
function receiptJson(r: CreateReceipt & { recovered?: string }) {
  const warnings = [
    ...r.warnings,
    ...(r.recovered ? [{ code: 'deployment_run_create_timeout_recovered', message: r.recovered }] : []),
  ];
  return { ...r, warnings };
}

/** What create and start-for-item send alike: the acting session, the explicit selection, I2's timeout. */
interface CreationRequest {
  sessionId: string | undefined;
  requirementIds: string[];
  planIds: string[];
  timeoutMs: number;
}

/** create and start-for-item: a run made under I2's timeout recovery, answered with its receipt. */
function creation<
  O extends z.infer<typeof BaseOptions> & { requirementId: string[]; planId: string[]; idempotencyKey?: string },
>(
  schema: z.ZodType<O>,
  create: (
    activities: DeploymentRunActivities,
    request: CreationRequest,
    o: O,
    args: string[],
  ) => Promise<CreateReceipt>,
) {
  return commandAction(
    schema,
    (ctx, o, args) =>
      createWithRecovery(ctx, !!o.json, !!o.idempotencyKey, (activities, timeoutMs) =>
        create(
          activities,
          {
            sessionId: o.session ?? process.env.YOKE_SESSION_ID,
            requirementIds: o.requirementId,
            planIds: o.planId,
            timeoutMs,
          },
          o,
          args,
        ),
      ),
    receiptLine,
    receiptJson,
  );
}

/**
 * execute / retry: a run whose status cannot walk is refused first (run_cancelled,
 * run_superseded...), Temporal or not; then Temporal must answer before anything is occupied
 * (a missing worker only delays the walk); then the Postgres transition, then the workflow of
 * the run's walk, searchable by project, status, origin and item. Should this process die
 * between the two, the sweep's reconciler starts the workflow (or: yoke deployment-runs repair RUN).
 */
async function startWalking(
  ctx: CommandContext,
  json: boolean,
  walkable: () => Promise<void>,
  transition: () => Promise<ExecuteResult>,
): Promise<WalkResult> {
  await walkable();
  const client = await ctx.temporal.get();
  const warnings: WalkResult['warnings'] = [];
  if (!(await ctx.temporal.hasWorker())) {
    const message = `no yoke worker polls task queue "${ctx.config.taskQueue}"; the run waits until one starts (npm start)`;
    // Issue 10: said on stderr to a person, and in the JSON an agent reads (it prints no stderr line then).
    warn(json, `warning: ${message}`);
    warnings.push({ code: 'no_worker', message });
  }
  const started = await transition();
  const { ensureRunWorkflow } = await import('../../temporal/runWorkflows');
  await ensureRunWorkflow(client, ctx.config.taskQueue, started);
  return { ...started, warnings };
}

/**
 * After a membership change commits: an executing run's workflow relabels its YokeItem search
 * attribute. The change itself stands either way; a Temporal that cannot be told is said, not fatal.
 */
async function relabelMembers(ctx: CommandContext, json: boolean, runId: string): Promise<void> {
  const { relabelRunMembers } = await import('../../activities/runs/runWorkflows');
  try {
    await relabelRunMembers(ctx.db, runId, async (id, labels) => {
      const { temporalRunWorkflows } = await import('../../temporal/runWorkflows');
      await temporalRunWorkflows(await ctx.temporal.get(), ctx.config.taskQueue).membersChanged(id, labels);
    });
  } catch (err) {
    warn(
      json,
      `warning: the membership changed, but run ${runId}'s workflow was not told (${(err as Error).message}); its YokeItem search attribute shows the old members until the next change, and a QA wait the change ended moves on at its next re-read (or now: yoke deployment-runs advance ${runId})`,
    );
  }
}

/** What execute and retry print: the run's walk, and what may keep it from moving. */
type WalkResult = ExecuteResult & { warnings: { code: string; message: string }[] };

/** execute and retry: the acting session moves the run (`executeRun` / `retryRun`), then its walk starts. */
function walkAction<R extends WalkResult>(
  transition: 'execute' | 'retry',
  render: (r: R) => string,
  after: (ctx: CommandContext, walked: WalkResult) => Promise<R>,
) {
  return commandAction(
    BaseOptions,
    async (ctx, o, [runId]) => {
      const request = { sessionId: actingSession(o), runId: runId! };
      const activities = await runs(ctx);
      const walked = await startWalking(
        ctx,
        !!o.json,
        () => activities.assertWalkable({ runId: request.runId, transition }),
        () => (transition === 'execute' ? activities.executeRun(request) : activities.retryRun(request)),
      );
      return after(ctx, walked);
    },
    render,
  );
}

/**
 * Q4 O4: a retry restores what failing retracted, but a blocking obligation recorded failed
 * stands, and fails its QA stage again: the retry says what to do next (`recovery`, null when
 * nothing failed). The retry itself has happened either way: a read that fails says nothing.
 */
async function retryRecovery(
  ctx: CommandContext,
  walked: WalkResult,
): Promise<WalkResult & { recovery: string | null }> {
  const { readQaPending, DEFAULT_QA_READ_DEADLINE_MS } = await import('../../activities/qa/pending');
  const report = await readQaPending(ctx.db, { runId: walked.run_id }, DEFAULT_QA_READ_DEADLINE_MS).catch(() => null);
  return { ...walked, recovery: report?.recovery ?? null };
}

/**
 * Tells the run's workflow to look at Postgres again; a run with no live workflow needs nothing.
 * A signal that cannot be sent is a warning, not a failure: the change is already in Postgres.
 */
async function poke(
  ctx: CommandContext,
  json: boolean,
  runId: string,
  signal: (defs: typeof Definitions, handle: WorkflowHandle) => Promise<void>,
): Promise<void> {
  try {
    const client = await ctx.temporal.get();
    const defs = await import('../../workflows/definitions');
    await signal(defs, client.workflow.getHandle(defs.runWorkflowId(runId)));
  } catch (err) {
    if ((err as Error).name === 'WorkflowNotFoundError') return;
    warn(
      json,
      // not `repair`: that starts a missing workflow, and this one runs; it only missed a nudge
      `warning: could not signal run ${runId}'s workflow (${(err as Error).message}); the change is recorded, and the workflow re-reads Postgres within 10 minutes by itself`,
    );
  }
}

function stageTable(view: Partial<RunView>): string {
  return table(
    ['#', 'STAGE', 'KIND', 'TARGET', 'STATUS', 'DETAIL'],
    (view.stages ?? []).map((s) => [
      s.ordinal,
      s.name,
      s.kind,
      s.target_env,
      s.status,
      (s.detail ?? '').split('\n')[0]!.slice(0, 80),
    ]),
  );
}

/** R1: a driver attachment as get and list show it; a run that can never move again shows it not live. */
function driverText(sessionId: string, live: boolean): string {
  return `${sessionId} (${live ? 'live' : 'lapsed'})`;
}

function runText(v: Partial<RunView>): string {
  const lines = [
    `run ${v.run_id}: ${v.project}/${v.flow} -> ${v.target} @ ${v.candidate_sha}`,
    // S1: a settling run is still executing; `get` names the phase, as watch and YokeRunStatus do.
    `status ${v.status}${v.settling ? ` (settling since ${v.settling_at})` : ''}${v.current_stage ? `, stage ${v.current_stage}` : ''}${v.terminal_reason ? ` (${v.terminal_reason})` : ''}`,
    `driver: ${v.driver ? driverText(v.driver.session_id, v.driver.live) : 'none'}`,
    `occupancy: ${v.occupancy?.occupying ? `${v.occupancy.units.join(', ')} - ${v.occupancy.open_lines.join('; ')}` : 'none'}`,
    `members: ${(v.member_items ?? []).map((m) => `${m.item} [${m.requirement_selection.join(', ')}]${m.selection_derived ? ' (derived)' : ''}`).join('; ') || '(none)'}`,
    `carried_work (${v.carried_work?.recorded ? 'recorded at freeze' : 'derived live'}): ${(v.carried_work?.items ?? []).map((i) => i.item).join(', ') || '(none)'}`,
  ];
  if (v.membership_removals?.length)
    lines.push(
      `removed: ${v.membership_removals.map((r) => `${r.item} (${r.reason}${r.later_run_id ? `, later in ${r.later_run_id}` : ''})`).join('; ')}`,
    );
  const blocked = v.settling ? v.settlement?.blocked : null;
  if (blocked) lines.push(`settlement blocked: ${String(blocked.message)}`, `  recovery: ${String(blocked.recovery)}`);
  const failing = v.settling ? failingEffectsText(v.settlement?.effects ?? []) : '';
  if (failing) lines.push(`settlement effects failing: ${failing}`);
  if ((v.takeover_chain?.length ?? 0) > 1) lines.push(`takeover chain: ${v.takeover_chain!.join(' -> ')}`);
  // Q4 O4: a blocking obligation recorded failed holds the run, retry after retry, until it is recorded again.
  if (v.recovery) lines.push(`next: ${v.recovery}`);
  if (v.stages) lines.push(stageTable(v));
  if (v.member_closure) lines.push(...memberClosureLines(v.member_closure));
  return lines.join('\n');
}

/** D2: the member closure diagnostic as `get --include-member-closure` prints it: one block per member. */
function memberClosureLines(c: NonNullable<RunView['member_closure']>): string[] {
  const lines = ['member closure:'];
  if (!c.members.length) lines.push('  (no members)');
  for (const m of c.members) {
    const held = m.held_with_run ? ', held with the run' : '';
    lines.push(`  ${m.item} (${m.delivery_intent}): ${m.settlement}${held}`);
    for (const r of m.blocked_reasons) lines.push(`    blocked: ${r.message}`);
    const p = m.prerequisites;
    lines.push(
      `    prerequisites: delivery rung ${p.delivery_rung_for_run ? 'stamped' : 'not stamped'}, status preflight ${p.status_preflight_for_run ? 'stamped' : 'not stamped'}`,
    );
    for (const d of p.dependencies)
      lines.push(
        `    depends on ${d.item}${d.environment ? ` delivered to ${d.environment}` : ''}: ${d.status} (${d.satisfied ? 'satisfied' : 'not satisfied'})`,
      );
    if (m.requirement_ids.length) lines.push(`    requirements: ${m.requirement_ids.join(', ')}`);
    if (m.atomic_siblings.length) lines.push(`    closes together with: ${m.atomic_siblings.join(', ')}`);
    for (const d of m.other_target_deferrals) lines.push(`    deferred: ${d}`);
  }
  if (c.release_lineage.length)
    lines.push(
      `release lineage: ${c.release_lineage.map((l) => `${l.run_id} (${l.status}, ${l.candidate_sha})`).join(' -> ')}`,
    );
  return lines;
}

export function registerDeploymentRuns(program: Command): void {
  const dr = program
    .command('deployment-runs')
    .description('deployment runs: create, compose, execute, drive and watch');
  // A command without positional arguments (create) also takes several values after one flag
  // (--plan-id a b); one with them takes a flag per value, so `--plan-id a WEB-1` keeps WEB-1 an item.
  const selection = (cmd: Command, several = false) =>
    cmd
      .option(
        `--requirement-id <id${several ? '...' : ''}>`,
        'explicit requirement selection (PREFIX-N/case or case), repeatable',
        collect,
      )
      .option(`--plan-id <id${several ? '...' : ''}>`, 'explicit plan selection, repeatable', collect);

  selection(
    dr
      .command('create')
      .description('create a run (idempotent per --idempotency-key, I1)')
      .requiredOption('--project <project>', 'project')
      .requiredOption('--flow <flow>', 'flow')
      .requiredOption('--target <env>', 'target environment')
      .requiredOption('--candidate <sha>', 'commit to deliver')
      .requiredOption('--idempotency-key <key>', 'names the one run this call intends')
      .option('--item <PREFIX-N...>', 'member items: --item A-1 A-2, or --item repeated', collect),
    true,
  ).action(
    creation(CreateOptions, (activities, request, o) =>
      activities.createRun({
        ...request,
        project: o.project,
        flow: o.flow,
        target: o.target,
        candidate: o.candidate,
        idempotencyKey: o.idempotencyKey,
        items: o.item,
      }),
    ),
  );

  selection(
    dr
      .command('start-for-item')
      .description('create a run for items and enrol them, in one transaction (D4)')
      .argument('<items...>', 'PREFIX-N ...')
      .requiredOption('--candidate <sha>', 'commit to deliver')
      .option('--flow <flow>', "flow (default: the project's completion flow)")
      .option('--target <env>', "target (default: the flow's last deploy stage)")
      .option('--idempotency-key <key>', 'names the one run this call intends'),
  ).action(
    creation(StartOptions, (activities, request, o, items) =>
      activities.startForItem({
        ...request,
        items,
        candidate: o.candidate,
        flow: o.flow,
        target: o.target,
        idempotencyKey: o.idempotencyKey,
      }),
    ),
  );

  selection(
    dr
      .command('add-item')
      .description('add a member (D5 admission, D6 warnings)')
      .argument('<run>', 'run id')
      .argument('<item>', 'PREFIX-N'),
  ).action(
    commandAction(
      BaseOptions.extend(Selection),
      async (ctx, o, [runId, item]) => {
        const added = await (
          await runs(ctx)
        ).addItem({
          sessionId: actingSession(o),
          runId: runId!,
          item: item!,
          requirementIds: o.requirementId,
          planIds: o.planId,
        });
        await relabelMembers(ctx, !!o.json, runId!);
        return added;
      },
      (r) => [`added ${r.item} to ${r.run_id}`, ...r.warnings.map((w) => `warning: ${w.message}`)].join('\n'),
    ),
  );

  dr.command('remove-item')
    .description('audited removal of a member (D1)')
    .argument('<run>', 'run id')
    .argument('<item>', 'PREFIX-N')
    .requiredOption('--reason <text>', 'why')
    .action(
      commandAction(
        BaseOptions.extend({ reason: nonEmpty }),
        async (ctx, o, [runId, item]) => {
          const removed = await (
            await runs(ctx)
          ).removeItem({ sessionId: actingSession(o), runId: runId!, item: item!, reason: o.reason });
          await relabelMembers(ctx, !!o.json, runId!);
          return removed;
        },
        (r) => `removed ${r.item} from ${r.run_id}: ${r.reason}`,
      ),
    );

  dr.command('get')
    .description('a run, or only the named fields (D1); --include-member-closure adds the diagnostic (D2)')
    .argument('<run>', 'run id')
    .argument('[fields...]', 'fields, e.g. member_items membership_removals carried_work')
    .option('--include-member-closure', 'add the member_closure diagnostic')
    .action(
      commandAction(
        BaseOptions.extend({ includeMemberClosure: z.boolean().optional() }),
        async (ctx, o, [runId, ...fields]) =>
          (await runs(ctx)).getRun({ runId: runId!, fields, includeMemberClosure: o.includeMemberClosure }),
        (v, _o, [, ...fields]) => (fields.length ? JSON.stringify(v, null, 2) : runText(v)),
      ),
    );

  dr.command('list')
    .description('runs, newest first')
    .option('--project <project>', 'only this project')
    .option('--status <status>', 'only this status')
    .action(
      commandAction(
        BaseOptions.extend({ project: nonEmpty.optional(), status: z.enum(RUN_STATUSES).optional() }),
        async (ctx, o) => (await runs(ctx)).listRuns(o),
        (rows) =>
          table(
            ['RUN', 'PROJECT', 'FLOW', 'TARGET', 'CANDIDATE', 'STATUS', 'STAGE', 'DRIVER'],
            rows.map((r) => [
              r.run_id,
              r.project,
              r.flow,
              r.target,
              r.candidate_sha.slice(0, 12),
              r.settling ? `${r.status} (settling)` : r.status,
              r.current_stage,
              r.driver_session_id ? driverText(r.driver_session_id, r.driver_live) : null,
            ]),
          ),
      ),
    );

  dr.command('execute')
    .description(
      'start the run: occupancy locks and check, freeze, then its workflow (O1-O3); you become its driver (R1)',
    )
    .argument('<run>', 'run id')
    .action(
      walkAction<WalkResult>(
        'execute',
        (r) =>
          `${r.resumed ? 'resumed' : 'executing'} ${r.run_id}, driven by ${r.driver_session_id}; occupies ${r.occupancy_units.join(', ')}\nfollow it: yoke deployment-runs watch ${r.run_id}`,
        async (_ctx, walked) => walked,
      ),
    );

  dr.command('heartbeat')
    .description('keep your driver attachment live (R1), and your session with it')
    .argument('<run>', 'run id')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, o, [runId]) => {
          const sessionId = actingSession(o);
          const r = await (await runs(ctx)).heartbeatRun({ sessionId, runId: runId! });
          if (r.took_over) await poke(ctx, !!o.json, r.run_id, (defs, h) => h.signal(defs.runTakenOver, { sessionId }));
          return r;
        },
        (r) =>
          `${r.run_id} driven by ${r.driver_session_id} (heartbeat ${r.driver_heartbeat_at})${r.took_over ? '; the previous attachment had lapsed' : ''}`,
      ),
    );

  dr.command('terminalize')
    .description('cancel or fail a run; unsettled run requirements are retracted (O4)')
    .argument('<run>', 'run id')
    .requiredOption('--disposition <d>', 'cancelled | failed')
    .requiredOption('--reason <text>', 'why')
    .action(
      commandAction(
        BaseOptions.extend({ disposition: z.enum(['cancelled', 'failed']), reason: nonEmpty }),
        async (ctx, o, [runId]) => {
          const r = await (
            await runs(ctx)
          ).terminalizeRun({
            sessionId: actingSession(o),
            runId: runId!,
            disposition: o.disposition,
            reason: o.reason,
          });
          await poke(ctx, !!o.json, r.run_id, (defs, h) => h.signal(defs.runTerminalized, { status: r.status }));
          return r;
        },
        (r) => `${r.run_id} ${r.status}${r.retracted.length ? `; retracted ${r.retracted.join(', ')}` : ''}`,
      ),
    );

  dr.command('retry')
    .description('retry a failed run: restores its automatic retractions and executes again (O4)')
    .argument('<run>', 'run id')
    .action(
      walkAction(
        'retry',
        (r) => `retrying ${r.run_id}, driven by ${r.driver_session_id}${r.recovery ? `\nnext: ${r.recovery}` : ''}`,
        retryRecovery,
      ),
    );

  dr.command('qa-verdict')
    .description('record a run-level QA verdict')
    .argument('<run>', 'run id')
    .requiredOption('--check <name>', 'check name')
    .requiredOption('--status <status>', 'passed | failed | waived')
    .action(
      commandAction(
        BaseOptions.extend({ check: nonEmpty, status: z.enum(['passed', 'failed', 'waived']) }),
        async (ctx, o, [runId]) => {
          const r = await (
            await runs(ctx)
          ).recordQaVerdict({ sessionId: actingSession(o), runId: runId!, checkName: o.check, status: o.status });
          await poke(ctx, !!o.json, r.run_id, (defs, h) => h.signal(defs.qaSettled));
          return r;
        },
        (r) => `${r.run_id} ${r.check_name}: ${r.status}`,
      ),
    );

  dr.command('approve')
    .description('approve a waiting approval stage')
    .argument('<run>', 'run id')
    .requiredOption('--stage <name>', 'approval stage')
    .action(
      commandAction(
        BaseOptions.extend({ stage: nonEmpty }),
        async (ctx, o, [runId]) => {
          const r = await (
            await runs(ctx)
          ).approveStage({ sessionId: actingSession(o), runId: runId!, stage: o.stage });
          await poke(ctx, !!o.json, r.run_id, (defs, h) => h.signal(defs.stageApproved, { stage: o.stage }));
          return r;
        },
        (r) => `${r.run_id} stage ${r.stage} approved by ${r.approved_by}`,
      ),
    );

  dr.command('update')
    .description("status succeeded: replay the run's settlement now (S5); refuses run_settlement_blocked naming why")
    .argument('<run>', 'run id')
    .argument('<field>', 'status')
    .argument('<value>', 'succeeded')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, o, [runId, field, value]) => {
          const r = await (
            await runs(ctx)
          ).updateRunStatus({ sessionId: actingSession(o), runId: runId!, field: field!, value: value! });
          await poke(ctx, !!o.json, r.run_id, (defs, h) => h.signal(defs.settlementReplay));
          if (r.status !== 'succeeded') {
            const { effectsPendingRefusal } = await import('../../activities/settlement/effects');
            throw effectsPendingRefusal('effects' in r ? r.effects : { run_id: r.run_id, failed: [], leased: [] });
          }
          return r;
        },
        (r) =>
          'commit' in r
            ? `${r.run_id} succeeded; closed ${r.commit.closed.join(', ') || '(none)'}${r.commit.attributed.length ? `; attributed ${r.commit.attributed.join(', ')}` : ''}`
            : `${r.run_id} already succeeded`,
      ),
    );

  dr.command('validate')
    .description('validate_composition now (D6, D9, D10): exit 1 with the first refusal, naming every one')
    .argument('<run>', 'run id')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, _o, [runId]) => (await runs(ctx)).validateRun({ runId: runId! }),
        (v) =>
          [
            `${v.run_id}: composition valid`,
            ...v.results.map((r) => `${r.code}: ${r.message}`),
            ...v.warnings.map((w) => `warning: ${w.message}`),
          ].join('\n'),
      ),
    );

  dr.command('repair')
    .description(
      "re-attach a workflow to an executing run whose workflow is not running (what the sweep's reconciler does)",
    )
    .argument('<run>', 'run id')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, _o, [runId]) => {
          const client = await ctx.temporal.get();
          const { runWorkflowActivities } = await import('../../activities/runs/runWorkflows');
          const { temporalRunWorkflows } = await import('../../temporal/runWorkflows');
          const workflows = temporalRunWorkflows(client, ctx.config.taskQueue);
          return runWorkflowActivities({ db: ctx.db, workflows }).reattachRun({ runId: runId! });
        },
        (r) =>
          r.workflow === 'running'
            ? `${r.run_id}: its workflow ${r.workflow_id} is running (walk ${r.walk}); nothing to repair`
            : `${r.run_id}: workflow ${r.workflow_id} ${r.workflow} for walk ${r.walk}`,
      ),
    );

  dr.command('watch')
    .description('follow a run stage by stage until it ends (JSON lines with --json)')
    .argument('<run>', 'run id')
    .option('--interval-ms <ms>', 'how often to read', '500')
    .option('--timeout <seconds>', 'stop watching (exit 3) after this long', '86400')
    .option('--json', 'print JSON lines')
    .action(async (runId: string, raw) => {
      const o = parseOptions(WatchOptions, raw);
      const { watchRun } = await import('../watchRun');
      const status = await withDb(async (ctx) =>
        watchRun(ctx, await runs(ctx), runId, {
          json: !!o.json,
          intervalMs: o.intervalMs,
          timeoutMs: o.timeout * 1000,
          session: o.session,
        }),
      );
      // Q4: a run held by blocking QA exits 5 after naming every unresolved obligation.
      if (status !== 'succeeded') process.exitCode = status === 'held' ? 5 : 1;
    });

  registerRunQa(dr);
  registerTakeover(dr, runs);
  registerArtifacts(dr);
}
