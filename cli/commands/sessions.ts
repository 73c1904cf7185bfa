import type { Command } from 'commander';
import { z } from 'zod';
import { HARNESSES } from '../../domain/harnesses';
import { HIDDEN_USAGE_NOTE } from '../../domain/usage/hiddenUsage';
import { sessionActivities } from '../../activities/sessions';
import { actingSession, BaseOptions, commandAction, contextWindow, nonEmpty, parseOptions } from '../context';
import { usageError } from '../../domain/errors';
import { table } from '../output';
import { claimTarget } from '../render';

// Issue 2: the acting session is --session S or YOKE_SESSION_ID, for these commands as for every other.
const SessionOpt = BaseOptions;
// The columns hold up to 200 characters (sessions.session_id, actor_id): longer is bad input.
const RegisterOptions = SessionOpt.extend({
  session: nonEmpty.max(200).optional(),
  actor: nonEmpty.max(200).optional(),
  project: nonEmpty.optional(),
  machine: nonEmpty.optional(),
  harness: z.enum(HARNESSES).optional(),
  probe: z.boolean().optional(),
  model: nonEmpty.optional(),
  effort: nonEmpty.optional(),
  window: contextWindow.optional(),
});

/** The session to register: --session S or YOKE_SESSION_ID, held to the column's 200 characters either way. */
function registeringSession(o: { session?: string }): string {
  return parseOptions(z.object({ session: nonEmpty.max(200) }), { session: actingSession(o) }).session;
}

export function registerSessions(program: Command): void {
  const sessions = program.command('sessions').description('registered sessions that claims belong to');

  sessions
    .command('register')
    .description(
      'register (or re-register) a session; re-registering with another --model/--effort/--window replaces the request and records the change',
    )
    .option('--session <id>', 'session id (default $YOKE_SESSION_ID)')
    .option(
      '--actor <actor>',
      'actor id (default: the connected Postgres role; another actor only when an admin connects)',
    )
    .option('--project <project>', 'project')
    .option('--machine <machine>', 'machine id')
    .option('--harness <harness>', 'claude | codex | cursor | other')
    .option('--model <model>', 'requested model (served facts are attested separately)')
    .option('--effort <effort>', 'requested effort')
    .option('--window <tokens>', 'requested context window')
    .option('--probe', 'a probe session: left out of machine usage windows')
    .action(
      commandAction(
        RegisterOptions,
        ({ db }, o) =>
          sessionActivities({ db }).registerSession({
            sessionId: registeringSession(o),
            actorId: o.actor,
            project: o.project,
            machine: o.machine,
            harness: o.harness,
            probe: o.probe,
            requestedModel: o.model,
            requestedEffort: o.effort,
            requestedWindow: o.window,
          }),
        (r) =>
          [
            `${r.registered ? 'registered' : 're-registered'} session ${r.session.session_id} for ${r.session.actor_id}`,
            ...r.requested_changes.map((c) => `requested ${c.fact}: ${c.from ?? '(none)'} -> ${c.to} (recorded)`),
          ].join('\n'),
        (r) => ({ ...r.session, registered: r.registered, requested_changes: r.requested_changes }),
      ),
    );

  sessions
    .command('heartbeat')
    .description('keep a session and its claims alive')
    .option('--session <id>', 'session id (default $YOKE_SESSION_ID)')
    .action(
      commandAction(
        SessionOpt,
        ({ db }, o) => sessionActivities({ db }).heartbeatSession({ sessionId: actingSession(o) }),
        (s) => `session ${s.session_id} alive at ${s.heartbeat_at}`,
      ),
    );

  sessions
    .command('end')
    .description('end a session; its non-sticky claims are released, sticky holds stay (C5)')
    .option('--session <id>', 'session id (default $YOKE_SESSION_ID)')
    .option('--if-claim-free', 'end only if the session holds no live non-sticky claim')
    .action(
      commandAction(
        SessionOpt.extend({ ifClaimFree: z.boolean().optional() }),
        async ({ db, line }, o) => {
          const r = await sessionActivities({ db, line }).endSession({
            sessionId: actingSession(o),
            ifClaimFree: o.ifClaimFree,
          });
          for (const w of r.warnings) process.stderr.write(`warning: ${w}\n`);
          return r;
        },
        (r) => {
          const lines = [
            r.ended
              ? `ended session ${r.session.session_id}`
              : r.blocking_claims.length
                ? `session ${r.session.session_id} not ended (holds claims)`
                : `session ${r.session.session_id} already ended${r.session.ended_at ? ` at ${r.session.ended_at}` : ''}`,
          ];
          for (const c of r.released_claims) lines.push(`  released ${claimTarget(c)} (claim ${c.claim_id})`);
          for (const c of r.retained_sticky_claims)
            // C9: the holder's actor releases it from any live session of its own; else an operator.
            lines.push(
              `  kept sticky ${claimTarget(c)} (claim ${c.claim_id}); release it from a live session of actor ${r.session.actor_id}: ` +
                `yoke claims work release --claim-id ${c.claim_id} --reason R --session S (or an operator releases it)`,
            );
          for (const c of r.blocking_claims) lines.push(`  still holds ${claimTarget(c)} (claim ${c.claim_id})`);
          return lines.join('\n');
        },
        (r) => ({
          ...r.session,
          ended: r.ended,
          released_claims: r.released_claims,
          retained_sticky_claims: r.retained_sticky_claims,
          blocking_claims: r.blocking_claims,
        }),
      ),
    );

  sessions
    .command('list')
    .description('list sessions with their measured usage and derived cost')
    .option('--project <project>', 'only this project')
    .option('--active-only', 'only live sessions')
    .option('--usage-last-24h', 'the 24-hour usage cohort (U13); combines with no other filter')
    .option(
      '--session <id>',
      'viewing session (default $YOKE_SESSION_ID): the cohort shows only what its actor may read',
    )
    .action(
      commandAction(
        BaseOptions.extend({
          project: nonEmpty.optional(),
          activeOnly: z.boolean().optional(),
          usageLast24h: z.boolean().optional(),
        }),
        async ({ db }, o) => {
          if (o.usageLast24h && (o.project || o.activeOnly)) {
            throw usageError('usage_last_24h_exclusive', '--usage-last-24h is exclusive of every other filter', {
              recovery: 'run it alone: yoke sessions list --usage-last-24h --json',
              details: { project: o.project ?? null, active_only: !!o.activeOnly },
            });
          }
          const { sessionUsageActivities } = await import('../../activities/usage/sessionUsage');
          const usage = sessionUsageActivities({ db });
          const sessions = sessionActivities({ db });
          let list = await sessions.listSessions(o.usageLast24h ? {} : o);
          if (o.usageLast24h) {
            const viewerId = o.session ?? process.env.YOKE_SESSION_ID;
            const viewer = viewerId ? { sessionId: viewerId } : undefined;
            const cohort = new Set((await usage.last24hCohort(viewer)).map((c) => c.session_id));
            list = list.filter((s) => cohort.has(s.session_id));
          }
          const fields = await usage.usageFields(list.map((s) => s.session_id));
          return list.map((s) => ({ ...s, ...fields.get(s.session_id)! }));
        },
        (rows) =>
          table(
            ['SESSION', 'ACTOR', 'PROJECT', 'MACHINE', 'HARNESS', 'TOKENS', 'COST', 'ENDED'],
            rows.map((s) => {
              // U13: hidden usage reads "not shown", never the "unavailable" of a session with no source
              const hidden = s.usage_note === HIDDEN_USAGE_NOTE;
              const cost =
                s.usage_cost_usd === null
                  ? s.usage_cost_status
                  : `$${s.usage_cost_usd.toFixed(4)}${s.usage_cost_status === 'priced' ? '' : ` (${s.usage_cost_status})`}`;
              return [
                s.session_id,
                s.actor_id,
                s.project,
                s.machine_id,
                s.harness,
                hidden ? 'not shown' : (s.usage_tokens ?? s.usage_status),
                hidden ? 'not shown' : cost,
                s.ended_at ?? s.terminated_at,
              ];
            }),
          ),
      ),
    );
}
