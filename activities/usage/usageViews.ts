import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { sessionById } from '../../db/sessions';
import { readSessionShow, readUsageReport } from '../../db/usageViews';
import { refusal, usageError } from '../../domain/errors';
import { sessionNotRegistered } from '../../domain/sessionRefusals';
import { BILLABLE_BUCKETS, addBuckets, billableTokens, zeroBuckets, type Buckets } from '../../domain/usage/buckets';
import { modelCost, type ModelCost } from '../../domain/usage/bucketCost';
import { costOf, revisionAt, type PricingRevision } from '../../domain/usage/pricing';
import { costCaveats, pricingCatalog } from './pricingCatalog';
import { usageNote, type UsageViewer } from './sessionUsage';

/**
 * The usage views people expect (ccusage's daily / per-session / per-model tables) and one
 * session's detail, read from Postgres: each report is one statement (the usage rows and the
 * imported pricing revisions together), priced with the revision in force at each session's
 * offered_at (U12), and bounded by the viewing session's grants (U13).
 */

export const REPORT_KEYS = ['day', 'session', 'model', 'machine', 'project'] as const;
export type ReportKey = (typeof REPORT_KEYS)[number];

export interface SessionShow {
  session_id: string;
  actor_id: string;
  project: string | null;
  machine_id: string | null;
  harness: string;
  status: 'live' | 'ended' | 'terminated';
  offered_at: string;
  ended_at: string | null;
  end_reason: string | null;
  identity: {
    requested: { model: string | null; effort: string | null; window: number | null };
    served: { model: string | null; effort: string | null; window: number | null; attested_at: string | null };
  };
  usage: {
    status: 'measured' | 'partial' | 'unavailable';
    folded_at: string | null;
    tokens: number | null;
    models: ModelCost[];
  };
  cost: {
    usd: number | null;
    status: 'priced' | 'partial' | 'unavailable';
    revision_id: string | null;
    revision_effective_at: string | null;
    estimated: boolean;
  };
  usage_note: string;
  caveats: string[];
}

interface ReportRow {
  key: string;
  sessions: number;
  models: string[];
  buckets: Buckets;
  total_tokens: number;
  cost_usd: number | null;
  cost_status: 'priced' | 'partial' | 'unavailable';
  /** `partial` when a session summed here has a partial reading (its tokens are a floor) */
  usage_status: 'measured' | 'partial';
  /** U12: what this row's cost rests on beyond the catalog's current prices (a back-dated or estimated revision), or null */
  cost_caveat: string | null;
}

/** `--since` / `--until`: a day (YYYY-MM-DD or YYYYMMDD, UTC) or an ISO timestamp. */
export function parseReportDate(raw: string, option: '--since' | '--until'): { at: string; day: boolean } {
  const compact = /^(\d{4})(\d{2})(\d{2})$/.exec(raw);
  const text = compact ? `${compact[1]}-${compact[2]}-${compact[3]}` : raw;
  const day = /^\d{4}-\d{2}-\d{2}$/.test(text);
  const ms = Date.parse(day ? `${text}T00:00:00Z` : text);
  if (Number.isNaN(ms) || (day && new Date(ms).toISOString().slice(0, 10) !== text)) {
    throw usageError('invalid_date', `${option} "${raw}" is not a date`, {
      recovery: `give a day as YYYY-MM-DD (or YYYYMMDD, UTC) or an ISO timestamp, e.g. ${option} 2026-11-01`,
      details: { option, value: raw },
    });
  }
  return { at: new Date(ms).toISOString(), day };
}

export function usageViewActivities(deps: { db: Kysely<Database> }) {
  const { db } = deps;

  function requireViewer(viewer: UsageViewer | undefined, actor: string | null) {
    if (viewer && actor === null) {
      throw sessionNotRegistered(viewer.sessionId);
    }
  }

  /** `yoke sessions show S`: identity (requested vs served), per-model buckets, cost per bucket, status, caveats. */
  async function showSession(input: { sessionId: string; viewer?: UsageViewer }): Promise<SessionShow> {
    const read = await readSessionShow(db, input.sessionId, input.viewer?.sessionId);
    requireViewer(input.viewer, read.viewer_actor);
    const s = read.rows;
    if (!s) {
      // U13: a session the roster lists but whose detail the viewer may not read is named as such
      const listed = await sessionById(db, input.sessionId);
      if (listed) {
        throw refusal(
          'session_not_found',
          `session "${input.sessionId}" is recorded, but its detail is not shown: your actor holds no grant on its project (U13)`,
          {
            recovery:
              'ask an admin for a grant on its project (yoke projects grant P --actor A --permission project.read)',
            details: { session_id: input.sessionId, visible: false },
          },
        );
      }
      throw refusal('session_not_found', `no session "${input.sessionId}" is recorded`, {
        recovery: 'list the sessions you may read: yoke sessions list',
        details: { session_id: input.sessionId },
      });
    }
    const catalog = pricingCatalog(read.revisions);
    const offered = new Date(s.offered_at);
    const revision = revisionAt(catalog, offered.toISOString());
    const totals = s.totals ?? {};
    const measured = s.usage_status && s.usage_status !== 'unavailable';
    const cost = measured ? costOf(totals, revision) : null;
    const models = Object.entries(totals).map(([model, usage]) => modelCost(model, usage, revision));
    const caveats = [...costCaveats(s.cost_caveat, cost, revision, offered), ...(cost?.gaps ?? [])];
    const endedAt = s.ended_at ?? s.terminated_at;
    return {
      session_id: s.session_id,
      actor_id: s.actor_id,
      project: s.project,
      machine_id: s.machine_id,
      harness: s.harness,
      status: s.ended_at ? 'ended' : s.terminated_at ? 'terminated' : 'live',
      offered_at: offered.toISOString(),
      ended_at: endedAt ? new Date(endedAt).toISOString() : null,
      end_reason: s.end_reason,
      identity: {
        requested: { model: s.requested_model, effort: s.requested_effort, window: s.requested_window },
        served: {
          model: s.served_model,
          effort: s.served_effort,
          window: s.served_window,
          attested_at: s.served_attested_at ? new Date(s.served_attested_at).toISOString() : null,
        },
      },
      usage: {
        status: s.usage_status ?? 'unavailable',
        folded_at: s.folded_at ? new Date(s.folded_at).toISOString() : null,
        tokens: measured ? models.reduce((sum, m) => sum + billableTokens(totals[m.model]!.all), 0) : null,
        models,
      },
      cost: {
        usd: cost?.usd ?? null,
        status: cost?.status ?? 'unavailable',
        revision_id: revision?.revision_id ?? null,
        revision_effective_at: revision?.effective_at ?? null,
        estimated: revision?.estimated ?? false,
      },
      usage_note: usageNote(
        s.usage_status ?? 'unavailable',
        s.usage_status ? (s.reasons ?? []) : ['nothing has been folded for this session'],
      ),
      caveats,
    };
  }

  /**
   * `yoke usage report --by K`: one row per day (UTC, of offered_at), session, model, machine
   * or project, in one statement; each session priced by the revision in force at its start.
   */
  async function usageReport(input: {
    by: ReportKey;
    since?: string;
    until?: string;
    viewer?: UsageViewer;
  }): Promise<{ by: ReportKey; since: string | null; until: string | null; rows: ReportRow[]; totals: ReportRow }> {
    const since = input.since ? parseReportDate(input.since, '--since') : undefined;
    const until = input.until ? parseReportDate(input.until, '--until') : undefined;
    // a day given to --until includes that whole day
    const untilAt = until ? new Date(Date.parse(until.at) + (until.day ? 86_400_000 : 0)).toISOString() : null;
    if (since && untilAt && Date.parse(since.at) >= Date.parse(untilAt)) {
      // an empty window would answer an all-zero report, as if nothing was used
      throw usageError('invalid_date_range', `--since ${input.since} is not before --until ${input.until}`, {
        recovery: 'give --since a day or instant before --until (--until includes its day), or leave one out',
        details: { since: input.since, until: input.until },
      });
    }
    const read = await readUsageReport(db, { sinceAt: since?.at ?? null, untilAt }, input.viewer?.sessionId);
    requireViewer(input.viewer, read.viewer_actor);
    const catalog = pricingCatalog(read.revisions);
    type Group = {
      sessions: Set<string>;
      models: Set<string>;
      buckets: Buckets;
      usd: number;
      statuses: Set<string>;
      partial: boolean;
      caveats: Set<string>;
    };
    const group = (): Group => ({
      sessions: new Set<string>(),
      models: new Set<string>(),
      buckets: zeroBuckets(),
      usd: 0,
      statuses: new Set<string>(),
      partial: false,
      caveats: new Set<string>(),
    });
    const groups = new Map<string, Group>();
    const all = group();
    for (const r of read.rows) {
      const offered = new Date(r.offered_at).toISOString();
      const key =
        input.by === 'day'
          ? offered.slice(0, 10)
          : input.by === 'session'
            ? r.session_id
            : input.by === 'model'
              ? r.model
              : input.by === 'machine'
                ? (r.machine_id ?? '(no machine)')
                : (r.project ?? '(no project)');
      const revision: PricingRevision | undefined = revisionAt(catalog, offered);
      const cost = costOf({ [r.model]: r.usage }, revision);
      // U12: every cost a back-dated (or estimated) revision prices names it, and a partial or
      // unavailable one names what has no price (as sessions show does)
      const caveats = [...costCaveats(r.cost_caveat, cost, revision, new Date(offered)), ...cost.gaps];
      for (const g of [groups.get(key) ?? group(), all]) {
        g.sessions.add(r.session_id);
        g.models.add(r.model);
        g.buckets = addBuckets(g.buckets, r.usage.all);
        g.usd += cost.usd ?? 0;
        g.statuses.add(cost.status);
        g.partial ||= r.usage_status === 'partial';
        for (const c of caveats) g.caveats.add(c);
        if (g !== all) groups.set(key, g);
      }
    }
    const row = (key: string, g: Group): ReportRow => {
      const status =
        g.statuses.size === 0
          ? 'priced'
          : g.statuses.size === 1
            ? ([...g.statuses][0] as ReportRow['cost_status'])
            : 'partial';
      return {
        key,
        sessions: g.sessions.size,
        models: [...g.models].sort(),
        buckets: g.buckets,
        total_tokens: BILLABLE_BUCKETS.reduce((sum, b) => sum + g.buckets[b], 0),
        cost_usd: status === 'unavailable' ? null : Math.round(g.usd * 1e6) / 1e6,
        cost_status: status,
        usage_status: g.partial ? 'partial' : 'measured',
        cost_caveat: g.caveats.size ? [...g.caveats].join('; ') : null,
      };
    };
    return {
      by: input.by,
      since: since?.at ?? null,
      until: untilAt,
      rows: [...groups.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([k, g]) => row(k, g)),
      totals: row('total', all),
    };
  }

  return { showSession, usageReport };
}
