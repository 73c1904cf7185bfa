import type { Command } from 'commander';
import { z } from 'zod';
import type { SessionShow } from '../../activities/usage/usageViews';
import { BILLABLE_BUCKETS } from '../../domain/usage/buckets';
import { BaseOptions, commandAction, nonEmpty, type CommandContext } from '../context';
import { table, withCaveats } from '../output';

async function views(ctx: CommandContext) {
  const { usageViewActivities } = await import('../../activities/usage/usageViews');
  return usageViewActivities({ db: ctx.db });
}

/** The viewing session (U13): --session, else YOKE_SESSION_ID; none is the operator at the control plane. */
function viewerOf(session: string | undefined) {
  const id = session ?? process.env.YOKE_SESSION_ID;
  return id ? { sessionId: id } : undefined;
}

const usd = (v: number | null) => (v === null ? '–' : `$${v.toFixed(4)}`);

function showText(s: SessionShow): string {
  const { requested, served } = s.identity;
  const lines = [
    `${s.session_id} (${s.harness}, ${s.status}${s.end_reason ? `: ${s.end_reason}` : ''}) actor ${s.actor_id}, project ${s.project ?? '–'}, machine ${s.machine_id ?? '–'}`,
    `offered ${s.offered_at}${s.ended_at ? `, ended ${s.ended_at}` : ''}`,
    `requested: model ${requested.model ?? '–'}, effort ${requested.effort ?? '–'}, window ${requested.window ?? '–'}`,
    `served:    model ${served.model ?? '–'}, effort ${served.effort ?? '–'}, window ${served.window ?? '–'}${served.attested_at ? ` (attested ${served.attested_at})` : ' (not attested)'}`,
    `usage ${s.usage.status}: ${s.usage.tokens ?? '–'} tokens; cost ${usd(s.cost.usd)} (${s.cost.status}, revision ${s.cost.revision_id ?? '–'}${s.cost.estimated ? ', estimated' : ''})`,
  ];
  for (const m of s.usage.models) {
    lines.push(
      '',
      `${m.model} (${m.rate_key ? `priced as ${m.rate_key}` : 'no price in the revision'}): ${usd(m.usd)}; reasoning ${m.reasoning_tokens} (within output)`,
    );
    lines.push(
      table(
        ['BUCKET', 'TOKENS', '$/MTOK', 'ABOVE 200K', 'COST'],
        BILLABLE_BUCKETS.map((b) => {
          const c = m.buckets[b];
          return [b, c.tokens, c.rate_per_mtok, c.above_200k_tokens || '', usd(c.usd)];
        }),
      ),
    );
  }
  lines.push('', `note: ${s.usage_note}`);
  for (const c of s.caveats) lines.push(`caveat: ${c}`);
  return lines.join('\n');
}

/** `yoke sessions show S` and `yoke usage report --by K`: the usage views (after registerSessions and registerUsage). */
export function registerUsageViews(program: Command): void {
  const sessions = program.commands.find((c) => c.name() === 'sessions')!;
  sessions
    .command('show')
    .description(
      'one session: identity (requested vs served), per-model buckets, cost per bucket with the pricing revision, status and caveats',
    )
    .argument('<session>', 'the session to show')
    .option('--session <viewer>', 'the viewing session (U13; default YOKE_SESSION_ID)')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, o, [sessionId]) =>
          (await views(ctx)).showSession({ sessionId: sessionId!, viewer: viewerOf(o.session) }),
        showText,
      ),
    );

  const usage = program.commands.find((c) => c.name() === 'usage')!;
  usage
    .command('report')
    .description('usage and cost per day (UTC), session, model, machine or project, priced per session start')
    .requiredOption('--by <key>', 'day | session | model | machine | project')
    .option('--since <date>', 'sessions offered on or after (YYYY-MM-DD, YYYYMMDD or ISO timestamp)')
    .option('--until <date>', 'sessions offered up to (a day includes the whole day)')
    .option('--session <viewer>', 'the viewing session (U13; default YOKE_SESSION_ID)')
    .action(
      commandAction(
        BaseOptions.extend({
          by: z.enum(['day', 'session', 'model', 'machine', 'project']),
          since: nonEmpty.optional(),
          until: nonEmpty.optional(),
        }),
        async (ctx, o) =>
          (await views(ctx)).usageReport({ by: o.by, since: o.since, until: o.until, viewer: viewerOf(o.session) }),
        (r, o) =>
          withCaveats(
            table(
              [
                o.by.toUpperCase(),
                'SESSIONS',
                'INPUT',
                'CACHED',
                'CACHE 5M',
                'CACHE 1H',
                'OUTPUT',
                'REASONING',
                'TOKENS',
                'COST',
                'STATUS',
              ],
              [...r.rows, r.totals].map((x) => [
                x.key,
                x.sessions,
                x.buckets.input,
                x.buckets.cached_input,
                x.buckets.cache_write,
                x.buckets.cache_write_long,
                x.buckets.output,
                x.buckets.reasoning,
                x.total_tokens,
                usd(x.cost_usd),
                x.usage_status === 'partial' ? `${x.cost_status}, usage partial` : x.cost_status,
              ]),
            ),
            r.rows.map((x) => ({ key: x.key, caveat: x.cost_caveat })),
          ),
      ),
    );
}
