import { BILLABLE_BUCKETS, type BillableBucket, type ModelUsage } from './buckets';
import { rateKeyFor, type PricingRevision } from './pricing';

/** One bucket of one model: its tokens and what they cost under the revision used (U7, U12). */
export interface BucketCost {
  tokens: number;
  /** Per million tokens; null when the revision prices no such bucket for the model. */
  rate_per_mtok: number | null;
  /** Tokens from requests above the 200k-input tier, priced at `above_200k_rate_per_mtok`. */
  above_200k_tokens: number;
  above_200k_rate_per_mtok: number | null;
  usd: number | null;
}

export interface ModelCost {
  model: string;
  /** The revision's rate key the model was priced by (`claude-opus-4-6[1m]` -> `claude-opus-4-6`). */
  rate_key: string | null;
  buckets: Record<BillableBucket, BucketCost>;
  /** A labelled subset of output (U7): shown, never priced again. */
  reasoning_tokens: number;
  usd: number | null;
}

const round = (usd: number) => Math.round(usd * 1e6) / 1e6;

/** The cost of each bucket of one model's usage; the same arithmetic as `costOf`, bucket by bucket. */
export function modelCost(model: string, usage: ModelUsage, revision: PricingRevision | undefined): ModelCost {
  const key = revision ? (rateKeyFor(model, revision.rates) ?? null) : null;
  const rates = key ? revision!.rates[key]! : undefined;
  let total: number | null = 0;
  const buckets = {} as Record<BillableBucket, BucketCost>;
  for (const bucket of BILLABLE_BUCKETS) {
    const long = usage.above_200k[bucket];
    const standard = usage.all[bucket] - long;
    const rate = rates?.[bucket] ?? null;
    const longRate = rates?.above_200k?.[bucket] ?? rate;
    const priced = (standard === 0 || rate !== null) && (long === 0 || longRate !== null);
    const usd = priced ? round((standard * (rate ?? 0) + long * (longRate ?? 0)) / 1_000_000) : null;
    buckets[bucket] = {
      tokens: usage.all[bucket],
      rate_per_mtok: rate,
      above_200k_tokens: long,
      above_200k_rate_per_mtok: long ? longRate : null,
      usd,
    };
    if (usd === null) total = null;
    else if (total !== null) total += usd;
  }
  return {
    model,
    rate_key: key,
    buckets,
    reasoning_tokens: usage.all.reasoning,
    usd: total === null ? null : round(total),
  };
}
