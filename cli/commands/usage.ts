import type { Command } from 'commander';
import { z } from 'zod';
import type { sessionUsage } from '../../workflows/sessionUsage';
import type { MachineUsage } from '../../activities/usage/sessionUsage';
import { YokeError } from '../../domain/errors';
import { BACKFILL_HARNESSES, FOLDED_HARNESSES } from '../../domain/harnesses';
import {
  actingSession,
  BaseOptions,
  commandAction,
  nonEmpty,
  parseOptions,
  withDb,
  type CommandContext,
  contextWindow,
} from '../context';
import { emit, table, warn, withCaveats } from '../output';

const collect = (value: string, previous: string[] = []) => [...previous, value];

async function usage(ctx: CommandContext) {
  const { sessionUsageActivities } = await import('../../activities/usage/sessionUsage');
  return sessionUsageActivities({ db: ctx.db });
}

/**
 * U4: served facts an earlier hook kept on this machine while Postgres was out of reach are
 * written by this one, before its own fold (a rollout's facts are newer and then win). A
 * write that fails leaves them kept for the next hook.
 */
async function flushPendingServed(ctx: CommandContext, sessionId: string): Promise<void> {
  const { clearPending, readPending } = await import('../pendingAttestation');
  const { databaseRole } = await import('../../config/databaseUrl');
  const pending = readPending(sessionId, databaseRole(ctx.config.databaseUrl));
  if (!pending?.model) return;
  const { sessionActivities } = await import('../../activities/sessions');
  try {
    await sessionActivities({ db: ctx.db }).attestServed({
      sessionId,
      model: pending.model,
      window: pending.window ?? undefined,
      effort: pending.effort ?? undefined,
    });
    clearPending(sessionId);
  } catch (err) {
    // kept for the next hook while Postgres is out of reach; one it refused would be refused
    // again (U4), so those facts go. The fold goes on either way.
    if (err instanceof YokeError && err.kind !== 'unreachable') clearPending(sessionId);
  }
}

/**
 * U10: a machine whose sessions were never measured says so instead of a zero; one measured
 * only in part names how many of its sessions the sum covers.
 */
function machineTokens(m: MachineUsage): string {
  if (m['24H TOKENS'] === null) return 'not measured';
  if (m.measured_sessions < m['24H SESSIONS'])
    return `${m['24H TOKENS']} (${m.measured_sessions} of ${m['24H SESSIONS']} sessions measured)`;
  return String(m['24H TOKENS']);
}

/** `yoke hooks usage`, `yoke pricing import|list`, `yoke machines usage`. */
export function registerUsage(program: Command): void {
  const hooks = program.command('hooks').description('entry points harness hooks call');
  hooks
    .command('usage')
    .description("fold a session's harness artifact into its measured usage (only new bytes; absolute totals)")
    .option('--session <id>', 'session (default $YOKE_SESSION_ID)')
    .requiredOption('--harness <harness>', 'claude | codex | cursor')
    .requiredOption('--artifact <path>', 'transcript / rollout / result capture (repeatable)', collect)
    .option('--async', "hand the fold to the session's fold workflow (session-usage/<session>) and return")
    .action(async (raw) => {
      const o = parseOptions(
        BaseOptions.extend({
          session: nonEmpty,
          harness: z.enum(FOLDED_HARNESSES),
          artifact: z.array(nonEmpty).min(1),
          async: z.boolean().optional(),
        }),
        { ...raw, session: actingSession(raw) },
      );
      // An artifact that does not exist yet is "no source" (unavailable); a directory, FIFO or
      // device is a mistake, refused here before any worker is asked to read it.
      const { assertRegularArtifacts } = await import('../../activities/usage/artifactFile');
      assertRegularArtifacts(o.artifact);
      if (o.async) {
        const queued = await withDb(async (ctx) => {
          await flushPendingServed(ctx, o.session);
          const { foldRequested, usageWorkflowId } = await import('../../workflows/definitions');
          const { resolve } = await import('node:path');
          // Issues 5 and 13: the request is recorded under the caller's own role first (the
          // database refuses another actor's session, before anything is signalled); the signal
          // is a payload-free nudge, and the worker folds only what it reads back.
          const { recordFoldRequest } = await import('../../activities/usage/foldRequests');
          await recordFoldRequest(ctx.db, {
            session_id: o.session,
            harness: o.harness,
            artifacts: o.artifact.map((a) => resolve(a)),
          });
          const client = await ctx.temporal.get(); // a fold request waits in the queue for a worker
          const workflowId = usageWorkflowId(o.session);
          await client.workflow.signalWithStart<typeof sessionUsage, [unknown?]>('sessionUsage', {
            workflowId,
            taskQueue: ctx.config.taskQueue,
            args: [{ sessionId: o.session }],
            signal: foldRequested,
            signalArgs: [],
          });
          return { session_id: o.session, queued: true, workflow_id: workflowId };
        });
        emit(!!o.json, queued, () => `fold of ${queued.session_id} queued on ${queued.workflow_id}`);
        return;
      }
      const r = await withDb(async (ctx) => {
        await flushPendingServed(ctx, o.session);
        const { requireFoldableSession } = await import('../../activities/usage/foldRequests');
        await requireFoldableSession(ctx.db, o.session);
        return (await usage(ctx)).foldSessionUsage({ sessionId: o.session, harness: o.harness, artifacts: o.artifact });
      });
      emit(
        !!o.json,
        r,
        () =>
          `${r.session_id}: ${r.usage_tokens === null ? 'usage unavailable' : `${r.usage_tokens} tokens`} (${r.status})${r.reasons.length ? `; ${r.reasons.join('; ')}` : ''}${r.replaced ? '' : ' (kept the earlier measured reading)'}`,
      );
    });

  hooks
    .command('status-line')
    .description('Claude status line: reads its JSON on stdin, attests the served model and window, prints a line (U3)')
    .action(async () => {
      const { statusLine } = await import('../statusLine');
      process.exitCode = await statusLine();
    });

  hooks
    .command('served-model')
    .description('settle provider-attested served facts for a session (U2, U4); retried when the write fails')
    .option('--session <id>', 'session (default $YOKE_SESSION_ID)')
    .requiredOption('--model <model>', 'served model, as the provider stated it')
    .option('--window <tokens>', 'served context window')
    .option('--effort <effort>', 'served effort (recorded with the model)')
    .action(async (raw) => {
      const o = parseOptions(
        BaseOptions.extend({
          session: nonEmpty,
          model: nonEmpty,
          window: contextWindow.optional(),
          effort: nonEmpty.optional(),
        }),
        { ...raw, session: actingSession(raw) },
      );
      // U4: facts a hook could not write before (status line or this one) are written with
      // these; this statement's facts win, the pending ones fill the gaps.
      const { clearPending, readPending, recordPending } = await import('../pendingAttestation');
      const { databaseRole } = await import('../../config/databaseUrl');
      const { loadConfig } = await import('../../config/yokeConfig');
      const role = databaseRole(loadConfig().databaseUrl);
      const before = readPending(o.session, role);
      const facts = {
        model: o.model,
        window: o.window ?? before?.window ?? undefined,
        effort: o.effort ?? before?.effort ?? undefined,
      };
      try {
        const r = await withDb(async ({ db }) => {
          const { sessionActivities } = await import('../../activities/sessions');
          return sessionActivities({ db }).attestServed({ sessionId: o.session, ...facts });
        });
        if (before) clearPending(o.session);
        emit(
          !!o.json,
          r,
          () => `${r.session_id} served ${r.served.model}${r.served.window ? ` (${r.served.window} ctx)` : ''}`,
        );
      } catch (err) {
        // Postgres out of reach: like the status line, the facts are kept on this machine for
        // the session's next hook (exit 0: a hook never breaks the harness), never dropped. A
        // refusal would be refused again: what was kept goes with it (U4).
        if (!(err instanceof YokeError) || err.kind !== 'unreachable') {
          if (before && err instanceof YokeError) clearPending(o.session);
          throw err;
        }
        const pending = recordPending(
          o.session,
          role,
          { model: facts.model, window: facts.window ?? null, effort: facts.effort ?? null },
          err.message,
        );
        const view = {
          session_id: o.session,
          served: { model: pending.model, window: pending.window, effort: pending.effort, attested_at: null },
          pending: { code: err.code, error: err.message, failed_at: pending.failed_at, attempts: pending.attempts },
        };
        emit(!!o.json, view, () => `${o.session} served ${facts.model}: served facts pending (${err.message})`);
      }
    });

  const pricing = program
    .command('pricing')
    .description('the pricing catalog: immutable revisions with effective dates');
  pricing
    .command('import')
    .description('import a pricing revision (JSON), or --genai-prices: one from the installed @pydantic/genai-prices')
    .argument('[file]', 'revision file')
    .option('--genai-prices', 'a new revision from the installed @pydantic/genai-prices version, effective now')
    .option('--backdate', 'allow an effective_at in the past: re-prices sessions already priced (audited)')
    .option('--reason <text>', 'why a back-dated revision re-prices the past (required with --backdate)')
    .action(
      commandAction(
        BaseOptions.extend({
          backdate: z.boolean().optional(),
          reason: nonEmpty.optional(),
          genaiPrices: z.boolean().optional(),
        }),
        async (ctx, o, [file]) =>
          (await usage(ctx)).importPricing({
            file,
            genaiPrices: o.genaiPrices,
            backdate: o.backdate,
            reason: o.reason,
          }),
        (r) =>
          `${r.imported ? 'imported' : 'shipped' in r && r.shipped ? 'shipped with yoke, already in force:' : 'already present:'} revision ${r.revision_id}${'backdated' in r && r.backdated ? ' (back-dated; audited)' : ''}`,
      ),
    );
  pricing
    .command('list')
    .description('pricing revisions, oldest first')
    .action(
      commandAction(
        BaseOptions,
        async (ctx) => (await usage(ctx)).listPricing(),
        (rows) =>
          table(
            ['REVISION', 'EFFECTIVE', 'MODELS', 'ESTIMATED'],
            rows.map((r) => [r.revision_id, r.effective_at, r.models, r.estimated ? 'yes' : 'no']),
          ),
      ),
    );

  const usageCommand = program.command('usage').description('usage measured from harness transcripts');
  usageCommand
    .command('backfill')
    .description(
      'register and fold every transcript of a harness found on this machine (progress bar on a terminal, JSON lines otherwise)',
    )
    .requiredOption('--harness <harness>', 'claude | codex')
    .option('--dir <dir>', "transcript directory (default: the harness's own: ~/.claude/projects, ~/.codex/sessions)")
    .option('--machine <machine>', 'machine id of the sessions it registers (default: this host name)')
    .option(
      '--actor <actor>',
      "actor of the sessions it registers (default: the connected role; an admin's connection: the local user)",
    )
    .option('--json', 'print JSON lines')
    .action(async (raw) => {
      const o = parseOptions(
        BaseOptions.extend({
          harness: z.enum(BACKFILL_HARNESSES),
          dir: nonEmpty.optional(),
          machine: nonEmpty.optional(),
          actor: nonEmpty.max(200).optional(),
        }),
        raw,
      );
      const { availableParallelism } = await import('node:os');
      const { backfillUsage } = await import('../../activities/usage/backfill');
      const bar =
        !o.json && process.stdout.isTTY ? (await import('../backfillProgress')).terminalProgress(process.stdout) : null;
      const line = (event: string, data: object) => {
        process.stdout.write(`${JSON.stringify({ event, ...data })}\n`);
      };
      const threads = availableParallelism();
      const result = await withDb(
        ({ db }) =>
          backfillUsage(
            { db },
            {
              harness: o.harness,
              dir: o.dir,
              machine: o.machine,
              actor: o.actor,
              threads,
              onStart: (p) => (bar ? bar.draw(p) : line('start', p)),
              onSession: (session, p) => (bar ? bar.draw(p) : line('session', { ...session, progress: p })),
            },
          ),
        { connections: threads },
      );
      // nothing found is said, with where it looked and how to look elsewhere (exit 0: nothing failed)
      const warnings = result.found
        ? []
        : [
            `no ${o.harness} transcripts under ${result.dirs.join(', ')}${o.dir ? '' : ` (the ${o.harness} default)`}; if they are elsewhere, pass --dir D`,
          ];
      if (!bar) {
        line('done', { ...result, warnings });
        for (const w of warnings) warn(!!o.json, `warning: ${w}`);
        return;
      }
      bar.done();
      for (const w of warnings) warn(false, `warning: ${w}`);
      process.stdout.write(
        `${result.found} transcript(s) under ${result.dirs.join(', ')}: ${result.registered} newly registered on ${result.machine_id}, ` +
          `${result.folded} folded${result.failed ? `, ${result.failed} failed (rerun with --json to see why)` : ''}; ` +
          `${result.usage_tokens} tokens in ${result.seconds}s on ${result.threads} thread(s)\n`,
      );
    });

  program
    .command('machines')
    .description('the machines sessions run on: their 24-hour usage (U13)')
    .command('usage')
    .description('24-hour usage per machine (U13)')
    .option('--session <id>', 'viewing session (default $YOKE_SESSION_ID): only what its actor may read')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, o) => {
          const viewerId = o.session ?? process.env.YOKE_SESSION_ID;
          return (await usage(ctx)).machinesUsage(viewerId ? { sessionId: viewerId } : undefined);
        },
        (rows) =>
          withCaveats(
            table(
              ['MACHINE', '24H TOKENS', '24H API COST', '24H SESSIONS'],
              rows.map((m) => [
                m.machine_id,
                machineTokens(m),
                `${m['24H API COST'] === null ? '–' : `$${m['24H API COST'].toFixed(4)}`}${m.cost_status === 'priced' ? '' : ` (${m.cost_status})`}`,
                m['24H SESSIONS'],
              ]),
            ),
            rows.map((m) => ({ key: m.machine_id, caveat: m.cost_caveat })),
          ),
      ),
    );
}
