import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { sql, type Kysely, type Selectable } from 'kysely';
import { z } from 'zod';
import { advisoryXactLock } from '../../db/advisoryLock';
import type { Database } from '../../db/database';
import type { Executor } from '../../db/pool';
import { recordEvent } from '../../db/events';
import { sessionById } from '../../db/sessions';
import { visibleSessionSql } from '../../db/visibility';
import { refusal, usageError } from '../../domain/errors';
import { sessionNotRegistered } from '../../domain/sessionRefusals';
import { UNRECORDED_USAGE_UNDERCOUNT, totalTokens, type UsageTotals } from '../../domain/usage/buckets';
import { costOf, revisionAt, type Cost, type PricingRevision } from '../../domain/usage/pricing';
import { assertRegularArtifacts } from './artifactFile';
import type { Folder } from './foldPool';
import { fold, READER_VERSION, type Checkpoint, type Harness, type Reading } from './readers';
import { SHIPPED_REVISIONS } from './seedPricing';

export interface UsageFields {
  usage_tokens: number | null;
  usage_status: 'measured' | 'partial' | 'unavailable';
  usage_cost_usd: number | null;
  usage_cost_status: Cost['status'];
  usage_note: string;
  cost_caveat: string | null;
}

export interface FoldResult {
  session_id: string;
  harness: Harness;
  status: 'measured' | 'partial' | 'unavailable';
  totals: UsageTotals;
  usage_tokens: number;
  reasons: string[];
  replaced: boolean;
}

const RateSchema = z
  .object({
    input: z.number().nonnegative(),
    cached_input: z.number().nonnegative(),
    cache_write: z.number().nonnegative(),
    cache_write_long: z.number().nonnegative(),
    output: z.number().nonnegative(),
  })
  .partial();
export const PricingFile = z
  .object({
    revision_id: z.string().min(1),
    effective_at: z.string().datetime({ offset: true }),
    source: z.string().min(1),
    estimated: z.boolean().default(false),
    rates: z.record(z.string(), RateSchema.extend({ above_200k: RateSchema.optional() })),
  })
  .strict();

/** U12: a revision effective this long before its import is back-dated (clock skew is not). */
const BACKDATE_GRACE_SECONDS = 60;

/** U12: a cost priced by a revision imported after the session began names that revision. */
export function backdateCaveat(revision: PricingRevision | undefined, offeredAt: Date): string | null {
  if (!revision?.backdated || Date.parse(revision.backdated.imported_at) <= offeredAt.getTime()) return null;
  return `priced by back-dated revision ${revision.revision_id} (effective ${revision.effective_at}, imported ${revision.backdated.imported_at}): ${revision.backdated.reason}`;
}

/** The catalog: the imported revisions and the shipped ones (each also importable explicitly). */
export function pricingCatalog(
  rows: {
    revision_id: string;
    effective_at: Date | string;
    estimated: boolean;
    rates: unknown;
    backdate_reason: string | null;
    imported_at: Date | string;
  }[],
): PricingRevision[] {
  const iso = (d: Date | string) => new Date(d).toISOString();
  const stored = rows.map((r) => ({
    revision_id: r.revision_id,
    effective_at: iso(r.effective_at),
    estimated: r.estimated,
    rates: r.rates as PricingRevision['rates'],
    backdated: r.backdate_reason ? { reason: r.backdate_reason, imported_at: iso(r.imported_at) } : null,
  }));
  return [...stored, ...SHIPPED_REVISIONS.filter((s) => !stored.some((r) => r.revision_id === s.revision_id))];
}

/** The session whose actor's grants bound what a usage read shows (U13); absent for an operator at the control plane. */
export interface UsageViewer {
  sessionId: string;
}

export function usageNote(status: UsageFields['usage_status'], reasons: string[]): string {
  const parts = status === 'unavailable' ? ['no usage source was found for this session', ...reasons] : reasons;
  return [...parts, UNRECORDED_USAGE_UNDERCOUNT].join('; ');
}

/**
 * `folder` reads the artifacts: `fold` in this thread by default; a backfill passes its fold
 * pool's, so many sessions are read on every core.
 */
export function sessionUsageActivities(deps: { db: Kysely<Database>; folder?: Folder }) {
  const { db } = deps;
  const folder = deps.folder ?? fold;

  async function revisions(): Promise<PricingRevision[]> {
    return pricingCatalog(await db.selectFrom('pricing_revisions').selectAll().execute());
  }

  /**
   * Folds a session's artifact (U9, U10). The artifact is read with no transaction open and no
   * lock held (a slow or endless read must never pin a Postgres connection); the checkpoint and
   * the totals it produced are then written in one short transaction under the session's
   * advisory lock, and only if no other fold landed since this one read its checkpoint (else it
   * reads again from the newer one), so folds of one session still count every byte once.
   * Absolute totals replace the stored ones, except that a reading that measured nothing never
   * replaces a measured one.
   */
  async function foldSessionUsage(input: {
    sessionId: string;
    harness: Harness;
    artifacts: string[];
  }): Promise<FoldResult> {
    if (input.artifacts.length === 0) {
      throw usageError('artifact_required', 'a fold needs at least one --artifact', {
        recovery: 'pass the transcript or rollout path with --artifact PATH',
      });
    }
    const artifacts = input.artifacts.map((a) => resolve(a));
    assertRegularArtifacts(artifacts);
    const session = await db
      .selectFrom('sessions')
      .select(['session_id'])
      .where('session_id', '=', input.sessionId)
      .executeTakeFirst();
    if (!session) {
      throw sessionNotRegistered(input.sessionId, input.harness);
    }
    const storedRow = (executor: Executor) =>
      executor.selectFrom('session_usage').selectAll().where('session_id', '=', input.sessionId).executeTakeFirst();
    let stored = await storedRow(db);
    for (;;) {
      const previous =
        stored && stored.harness === input.harness ? (stored.checkpoint as unknown as Checkpoint) : undefined;
      const reading = await folder(input.harness, previous, artifacts);
      const written = await db.transaction().execute(async (trx) => {
        await advisoryXactLock(trx, `usage-fold:${input.sessionId}`);
        const now = await storedRow(trx);
        if (now?.folded_at.getTime() !== stored?.folded_at.getTime()) return { raced: now };
        return { result: await writeReading(trx, input, artifacts, stored, reading) };
      });
      if (written.result) return written.result;
      stored = written.raced; // another fold landed while this one read: fold on from its checkpoint
    }
  }

  async function writeReading(
    trx: Executor,
    input: { sessionId: string; harness: Harness },
    artifacts: string[],
    stored: Selectable<Database['session_usage']> | undefined,
    reading: Reading,
  ): Promise<FoldResult> {
    const status: FoldResult['status'] = !reading.measured
      ? 'unavailable'
      : reading.reasons.length
        ? 'partial'
        : 'measured';
    const keepOld = !reading.measured && stored && stored.status !== 'unavailable';
    const reasons = reading.measured
      ? reading.reasons
      : [`no usage rows in ${artifacts.join(', ')}`, ...reading.reasons];
    if (!keepOld) {
      const row = {
        harness: input.harness,
        reader_version: READER_VERSION,
        status,
        totals: JSON.stringify(reading.totals),
        reasons: JSON.stringify(reasons),
        cost_caveat: reading.cost_caveat,
        checkpoint: JSON.stringify(reading.checkpoint),
      };
      await trx
        .insertInto('session_usage')
        .values({ session_id: input.sessionId, ...row })
        .onConflict((oc) => oc.column('session_id').doUpdateSet({ ...row, folded_at: sql`clock_timestamp()` }))
        .execute();
    }
    const served = reading.checkpoint.served;
    if (input.harness === 'codex' && (served?.model || served?.window)) {
      await trx
        .updateTable('sessions')
        .set({
          served_model: served.model,
          // U3: facts are never unlearned: a statement without a window keeps the attested one
          served_window: served.window ?? sql<number | null>`served_window`,
          served_effort: served.effort ?? sql<string | null>`served_effort`,
          served_attested_at: sql`now()`,
        })
        .where('session_id', '=', input.sessionId)
        .execute();
    }
    const totals = keepOld ? (stored!.totals as unknown as UsageTotals) : reading.totals;
    return {
      session_id: input.sessionId,
      harness: input.harness,
      status: keepOld ? stored!.status : status,
      totals,
      usage_tokens: totalTokens(totals),
      reasons: keepOld ? (stored!.reasons as string[]) : reasons,
      replaced: !keepOld,
    };
  }

  /** U12: the derived roster fields; cost from the revision effective at the session's offered_at. */
  async function usageFields(sessionIds: string[]): Promise<Map<string, UsageFields>> {
    const out = new Map<string, UsageFields>();
    if (sessionIds.length === 0) return out;
    const [rows, catalog] = await Promise.all([
      db
        .selectFrom('sessions as s')
        .leftJoin('session_usage as u', 'u.session_id', 's.session_id')
        .select(['s.session_id', 's.offered_at', 'u.status', 'u.totals', 'u.reasons', 'u.cost_caveat'])
        .where('s.session_id', 'in', sessionIds)
        .execute(),
      revisions(),
    ]);
    for (const r of rows) {
      if (!r.status) {
        out.set(r.session_id, {
          usage_tokens: null,
          usage_status: 'unavailable',
          usage_cost_usd: null,
          usage_cost_status: 'unavailable',
          usage_note: usageNote('unavailable', ['nothing has been folded for this session']),
          cost_caveat: null,
        });
        continue;
      }
      const totals = r.totals as unknown as UsageTotals;
      const revision = revisionAt(catalog, r.offered_at.toISOString());
      const cost = costOf(totals, revision);
      const caveats = [
        r.cost_caveat,
        cost.estimated ? `priced with estimated revision ${cost.revision_id}` : null,
        backdateCaveat(revision, r.offered_at),
        ...cost.gaps,
      ].filter((c): c is string => !!c);
      out.set(r.session_id, {
        usage_tokens: r.status === 'unavailable' ? null : totalTokens(totals),
        usage_status: r.status,
        usage_cost_usd: r.status === 'unavailable' ? null : cost.usd,
        usage_cost_status: r.status === 'unavailable' ? 'unavailable' : cost.status,
        usage_note: usageNote(r.status, r.reasons as string[]),
        cost_caveat: caveats.length ? caveats.join('; ') : null,
      });
    }
    return out;
  }

  /**
   * U12: prices cannot be rewritten after the fact. A revision takes effect from now on; one
   * effective in the past would re-price sessions already priced, so it needs `backdate` with
   * a reason, is audited, and every cost it prices names it in cost_caveat.
   */
  async function importPricing(input: { file?: string; genaiPrices?: boolean; backdate?: boolean; reason?: string }) {
    if (input.backdate && !input.reason?.trim()) {
      throw usageError('backdate_reason_required', '--reason: a back-dated pricing revision needs a reason', {
        recovery: 'yoke pricing import FILE --backdate --reason "why past sessions are re-priced"',
        details: { option: '--reason' },
      });
    }
    if (!input.file === !input.genaiPrices) {
      throw usageError('pricing_source_required', 'name one pricing source: a revision FILE or --genai-prices', {
        recovery: 'yoke pricing import FILE, or: yoke pricing import --genai-prices',
        details: { file: input.file ?? null, genai_prices: !!input.genaiPrices },
      });
    }
    if (input.genaiPrices) return importGenaiPrices(input);
    const file = input.file!;
    let document: unknown;
    try {
      document = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw usageError(
        'invalid_pricing_file',
        `cannot read pricing revision ${input.file}: ${(err as Error).message}`,
        {
          recovery: 'pass a JSON file with revision_id, effective_at, source and rates',
          details: { file: input.file },
        },
      );
    }
    return storeRevision(document, file, input);
  }

  /**
   * `--genai-prices`: a new revision from the installed @pydantic/genai-prices, effective now
   * (U12: never re-pricing the past). The version the shipped revision came from is already
   * in force and is not imported again.
   */
  async function importGenaiPrices(input: { backdate?: boolean; reason?: string }) {
    const { installedGenaiPrices } = await import('./genaiPricesPackage');
    const { revisionFromGenaiPrices } = await import('../../domain/usage/genaiPrices');
    const { version, providers } = installedGenaiPrices();
    const shipped = SHIPPED_REVISIONS.find((r) => r.revision_id === `genai-prices-${version}`);
    if (shipped) return { revision_id: shipped.revision_id, imported: false, shipped: true };
    const { revision, notes } = revisionFromGenaiPrices(providers, version, new Date().toISOString());
    return { ...(await storeRevision(revision, `@pydantic/genai-prices ${version}`, input)), notes };
  }

  async function storeRevision(document: unknown, origin: string, input: { backdate?: boolean; reason?: string }) {
    const parsed = PricingFile.safeParse(document);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw usageError(
        'invalid_pricing_file',
        `${origin}: ${issue.path.join('.') || '(top level)'}: ${issue.message}`,
        { recovery: 'fix the named field and import again', details: { file: origin } },
      );
    }
    const r = parsed.data;
    const existing = await db
      .selectFrom('pricing_revisions')
      .selectAll()
      .where('revision_id', '=', r.revision_id)
      .executeTakeFirst();
    if (existing) {
      if (JSON.stringify(existing.rates) === JSON.stringify(r.rates))
        return { revision_id: r.revision_id, imported: false };
      throw refusal(
        'pricing_revision_immutable',
        `pricing revision ${r.revision_id} already exists with other rates; revisions are immutable`,
        {
          recovery: 'import the new prices as a new revision_id with its own effective_at',
          details: { revision_id: r.revision_id },
        },
      );
    }
    return db.transaction().execute(async (trx) => {
      const { rows } = await sql<{ past: boolean; now: Date }>`
        SELECT ${r.effective_at}::timestamptz < now() - make_interval(secs => ${BACKDATE_GRACE_SECONDS}) AS past, now()`.execute(
        trx,
      );
      const past = rows[0]!.past;
      if (past && !input.backdate) {
        throw refusal(
          'pricing_revision_backdated',
          `pricing revision ${r.revision_id} is effective ${r.effective_at}, before now (${rows[0]!.now.toISOString()}): it would re-price sessions already priced`,
          {
            recovery: `set effective_at to now or later, or re-price the past on purpose: yoke pricing import ${origin} --backdate --reason R`,
            details: { revision_id: r.revision_id, effective_at: r.effective_at },
          },
        );
      }
      await trx
        .insertInto('pricing_revisions')
        .values({
          revision_id: r.revision_id,
          effective_at: r.effective_at,
          source: r.source,
          estimated: r.estimated,
          rates: JSON.stringify(r.rates),
          backdate_reason: past ? input.reason!.trim() : null,
        })
        .execute();
      if (past) {
        await recordEvent(trx, {
          event_type: 'PricingRevisionBackdated',
          payload: { revision_id: r.revision_id, effective_at: r.effective_at, reason: input.reason!.trim() },
        });
      }
      return { revision_id: r.revision_id, imported: true, backdated: past };
    });
  }

  async function listPricing() {
    return (await revisions())
      .sort((a, b) => Date.parse(a.effective_at) - Date.parse(b.effective_at))
      .map((r) => ({ ...r, models: Object.keys(r.rates).length }));
  }

  /**
   * U13: the 24-hour cohort: sessions ended (ended_at, else terminated_at) in the trailing
   * 24 h, plus sessions offered inside it and still open; probes and rows without a machine
   * are left out. Each session counts once.
   */
  async function viewerActor(viewer: UsageViewer): Promise<string> {
    const session = await sessionById(db, viewer.sessionId);
    if (!session) {
      throw sessionNotRegistered(viewer.sessionId);
    }
    return session.actor_id;
  }

  async function last24hCohort(viewer?: UsageViewer): Promise<{ session_id: string; machine_id: string }[]> {
    // U13: a session sees usage only for what its actor may read.
    const visible = viewer ? visibleSessionSql('sessions', await viewerActor(viewer)) : sql<boolean>`true`;
    const { rows } = await sql<{ session_id: string; machine_id: string }>`
      SELECT session_id, machine_id FROM sessions
       WHERE NOT probe AND machine_id IS NOT NULL AND ${visible}
         AND (coalesce(ended_at, terminated_at) >= now() - interval '24 hours'
              OR (coalesce(ended_at, terminated_at) IS NULL AND offered_at >= now() - interval '24 hours'))
       ORDER BY offered_at`.execute(db);
    return rows;
  }

  async function machinesUsage(viewer?: UsageViewer) {
    const cohort = await last24hCohort(viewer);
    const fields = await usageFields(cohort.map((c) => c.session_id));
    const machines = new Map<string, { tokens: number; cost: number; sessions: number; cost_status: Set<string> }>();
    for (const c of cohort) {
      const m = machines.get(c.machine_id) ?? { tokens: 0, cost: 0, sessions: 0, cost_status: new Set<string>() };
      const f = fields.get(c.session_id)!;
      m.tokens += f.usage_tokens ?? 0;
      m.cost += f.usage_cost_usd ?? 0;
      m.sessions += 1;
      m.cost_status.add(f.usage_cost_status);
      machines.set(c.machine_id, m);
    }
    return [...machines.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([machine_id, m]) => ({
        machine_id,
        '24H TOKENS': m.tokens,
        '24H API COST': Math.round(m.cost * 1e6) / 1e6,
        '24H SESSIONS': m.sessions,
        cost_status: m.cost_status.size === 1 ? [...m.cost_status][0] : 'partial',
      }));
  }

  return { foldSessionUsage, usageFields, importPricing, listPricing, last24hCohort, machinesUsage };
}

export type SessionUsageActivities = ReturnType<typeof sessionUsageActivities>;
