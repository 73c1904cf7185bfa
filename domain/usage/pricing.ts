import { BILLABLE_BUCKETS, type Buckets, type BillableBucket, type UsageTotals } from './buckets';

/**
 * U12: dollar cost is derived at read time, never stored, from the immutable catalog
 * revision effective at the session's offered_at. An unknown model or an unpriced bucket
 * gives a named partial or unavailable cost; an estimated revision stays labelled.
 */
export type Rates = Partial<Record<BillableBucket, number>>;

export interface ModelRates extends Rates {
  /** Rates for requests above the 200k-input tier, where the provider charges more. */
  above_200k?: Rates;
}

export interface PricingRevision {
  revision_id: string;
  effective_at: string;
  estimated: boolean;
  rates: Record<string, ModelRates>;
  /** U12: set when the revision was imported after its effective date, on purpose. */
  backdated?: { reason: string; imported_at: string } | null;
}

export interface Cost {
  usd: number | null;
  status: 'priced' | 'partial' | 'unavailable';
  revision_id: string | null;
  estimated: boolean;
  /** What could not be priced: unknown models, unpriced buckets. */
  gaps: string[];
}

/** Model ids as harnesses print them: `claude-sonnet-4-5-20250929`, `claude-opus-4-6[1m]`. */
export function rateKeyFor(model: string, rates: Record<string, ModelRates>): string | undefined {
  const bare = model.replace(/\[[^\]]*\]$/, '').trim();
  if (Object.hasOwn(rates, bare)) return bare; // own keys only: a model may be called `constructor`
  return Object.keys(rates)
    .filter((k) => bare.startsWith(`${k}-`) || bare === k)
    .sort((a, b) => b.length - a.length)[0];
}

/** The revision in force at `at`: the newest whose effective_at is not after it. */
export function revisionAt(revisions: PricingRevision[], at: string): PricingRevision | undefined {
  return revisions
    .filter((r) => Date.parse(r.effective_at) <= Date.parse(at))
    .sort((a, b) => Date.parse(b.effective_at) - Date.parse(a.effective_at))[0];
}

function minus(a: Buckets, b: Buckets): Buckets {
  return {
    input: a.input - b.input,
    cached_input: a.cached_input - b.cached_input,
    cache_write: a.cache_write - b.cache_write,
    cache_write_long: a.cache_write_long - b.cache_write_long,
    output: a.output - b.output,
    reasoning: a.reasoning - b.reasoning,
  };
}

export function costOf(totals: UsageTotals, revision: PricingRevision | undefined): Cost {
  const models = Object.keys(totals).filter((m) => BILLABLE_BUCKETS.some((b) => totals[m]!.all[b] > 0));
  if (!revision)
    return {
      usd: null,
      status: 'unavailable',
      revision_id: null,
      estimated: false,
      gaps: ['no pricing revision was in force at the session start'],
    };
  if (models.length === 0)
    return { usd: 0, status: 'priced', revision_id: revision.revision_id, estimated: revision.estimated, gaps: [] };
  let usd = 0;
  let priced = 0;
  const gaps: string[] = [];
  for (const model of models) {
    const key = rateKeyFor(model, revision.rates);
    if (!key) {
      gaps.push(`model ${model} has no price in revision ${revision.revision_id}`);
      continue;
    }
    const rates = revision.rates[key]!;
    const usage = totals[model]!;
    const standard = minus(usage.all, usage.above_200k);
    let complete = true;
    for (const [part, parts] of [
      [standard, rates],
      [usage.above_200k, rates.above_200k ?? rates],
    ] as const) {
      for (const bucket of BILLABLE_BUCKETS) {
        if (part[bucket] === 0) continue;
        const rate = parts[bucket] ?? (part === usage.above_200k ? rates[bucket] : undefined);
        if (rate === undefined) {
          gaps.push(`${model}: ${bucket} is unpriced in revision ${revision.revision_id}`);
          complete = false;
          continue;
        }
        usd += (part[bucket] * rate) / 1_000_000;
      }
    }
    if (complete) priced++;
  }
  const status = gaps.length === 0 ? 'priced' : priced === 0 && usd === 0 ? 'unavailable' : 'partial';
  return {
    usd: status === 'unavailable' ? null : Math.round(usd * 1e6) / 1e6,
    status,
    revision_id: revision.revision_id,
    estimated: revision.estimated,
    gaps,
  };
}
