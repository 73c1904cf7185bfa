import type { ModelRates, PricingRevision, Rates } from './pricing';

/**
 * Pricing revisions built from `@pydantic/genai-prices` (a maintained library of dated
 * Anthropic and OpenAI prices, 1-hour cache writes and tiers included). Pure: the caller
 * passes the package's provider data and version. yoke keeps its own immutable revisions:
 * each package version becomes one revision `genai-prices-<version>` with its own
 * effective date, and a newer package is a new revision, never a rewrite.
 */

/** The shapes of the package's data this conversion reads (its own types, narrowed). */
type Match =
  | { and: Match[] }
  | { or: Match[] }
  | { equals: string }
  | { starts_with: string }
  | { ends_with: string }
  | { contains: string }
  | { regex: string };
type Price = number | { base: number; tiers: { start: number; price: number }[] } | undefined;
interface Model {
  id: string;
  match: Match;
  prices:
    Record<string, Price> | { constraint?: { type: string; start_date?: string }; prices: Record<string, Price> }[];
}
export interface GenaiProvider {
  id: string;
  models: Model[];
}

/** The providers yoke's harnesses are served by. */
export const GENAI_PROVIDERS = ['anthropic', 'openai'] as const;

/** genai-prices price keys (per million tokens) to yoke's disjoint buckets (U7). */
const BUCKET_OF: Record<string, keyof Rates> = {
  input_mtok: 'input',
  cache_read_mtok: 'cached_input',
  cache_write_mtok: 'cache_write',
  cache_write_1h_mtok: 'cache_write_long',
  output_mtok: 'output',
};

/** yoke prices one tier: requests above 200k input tokens (`above_200k`). */
const LONG_CONTEXT_START = 200_000;

/** The model ids a match names exactly or by prefix: each becomes a rate key (`rateKeyFor` matches prefixes). */
function namesOf(match: Match): string[] {
  if ('or' in match) return match.or.flatMap(namesOf);
  if ('and' in match) return [];
  if ('equals' in match) return [match.equals];
  if ('starts_with' in match) return [match.starts_with.replace(/[-.]$/, '')];
  return [];
}

/** The prices in force at `at` when the model's prices changed over time (start_date constraints). */
function pricesAt(model: Model, at: string): Record<string, Price> | undefined {
  if (!Array.isArray(model.prices)) return model.prices;
  const dated = model.prices.filter(
    (p) => !p.constraint || (p.constraint.type === 'start_date' && (p.constraint.start_date ?? '') <= at),
  );
  return dated.sort((a, b) => (a.constraint?.start_date ?? '').localeCompare(b.constraint?.start_date ?? '')).at(-1)
    ?.prices;
}

function ratesOf(prices: Record<string, Price>, notes: string[], id: string): ModelRates | undefined {
  const rates: ModelRates = {};
  const long: Rates = {};
  for (const [key, price] of Object.entries(prices)) {
    const bucket = BUCKET_OF[key];
    if (!bucket || price === undefined) continue;
    if (typeof price === 'number') {
      rates[bucket] = price;
      continue;
    }
    rates[bucket] = price.base;
    for (const tier of price.tiers) {
      if (tier.start === LONG_CONTEXT_START) long[bucket] = tier.price;
      else notes.push(`${id}: ${key} tier from ${tier.start} tokens is priced at the base rate`);
    }
  }
  if (rates.input === undefined && rates.output === undefined) return undefined;
  if (Object.keys(long).length) rates.above_200k = long;
  return rates;
}

/**
 * One revision from the package's providers: every Anthropic and OpenAI model's prices in
 * force at `effectiveAt`, under its id and the names its match gives.
 */
export function revisionFromGenaiPrices(
  providers: GenaiProvider[],
  version: string,
  effectiveAt: string,
): { revision: PricingRevision & { source: string }; notes: string[] } {
  const rates: Record<string, ModelRates> = {};
  const notes: string[] = [];
  for (const provider of providers.filter((p) => (GENAI_PROVIDERS as readonly string[]).includes(p.id))) {
    for (const model of provider.models) {
      const prices = pricesAt(model, effectiveAt);
      const modelRates = prices && ratesOf(prices, notes, model.id);
      if (!modelRates) continue;
      for (const name of new Set([model.id, ...namesOf(model.match)])) rates[name] ??= modelRates;
    }
  }
  const sorted = Object.fromEntries(Object.entries(rates).sort(([a], [b]) => a.localeCompare(b)));
  return {
    revision: {
      revision_id: `genai-prices-${version}`,
      effective_at: effectiveAt,
      estimated: false,
      rates: sorted,
      source: `@pydantic/genai-prices ${version}`,
    },
    notes,
  };
}
