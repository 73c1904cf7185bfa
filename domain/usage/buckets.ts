/**
 * U7: every reader converts its source into the same disjoint billable buckets before
 * anything is stored, so one calculation prices every harness and nothing is charged twice.
 * `reasoning` is a labelled subset of `output`, never added to a total.
 */
export const BILLABLE_BUCKETS = ['input', 'cached_input', 'cache_write', 'cache_write_long', 'output'] as const;
export type BillableBucket = (typeof BILLABLE_BUCKETS)[number];

export interface Buckets {
  input: number;
  cached_input: number;
  cache_write: number;
  cache_write_long: number;
  output: number;
  /** Subset of output (Claude thinking, Codex reasoning): shown, never added again. */
  reasoning: number;
}

/** Per model: all calls, and the part of them made by requests above the 200k-input tier. */
export interface ModelUsage {
  all: Buckets;
  above_200k: Buckets;
}

export type UsageTotals = Record<string, ModelUsage>;

export const LONG_CONTEXT_THRESHOLD = 200_000;

export const UNRECORDED_USAGE_UNDERCOUNT =
  'context compaction and summarization calls write no usage row and are not counted (a known undercount, never estimated)';

export function zeroBuckets(): Buckets {
  return { input: 0, cached_input: 0, cache_write: 0, cache_write_long: 0, output: 0, reasoning: 0 };
}

export function addBuckets(a: Buckets, b: Buckets): Buckets {
  return {
    input: a.input + b.input,
    cached_input: a.cached_input + b.cached_input,
    cache_write: a.cache_write + b.cache_write,
    cache_write_long: a.cache_write_long + b.cache_write_long,
    output: a.output + b.output,
    reasoning: a.reasoning + b.reasoning,
  };
}

export function billableTokens(b: Buckets): number {
  return BILLABLE_BUCKETS.reduce((sum, k) => sum + b[k], 0);
}

/** Input a single request carried, for the long-context tier. */
export function requestInput(b: Buckets): number {
  return b.input + b.cached_input + b.cache_write + b.cache_write_long;
}

/**
 * Adds one call's buckets to a model's totals, tiering the call by its own input size;
 * `sign = -1` takes back a call counted earlier (a streaming snapshot that grew).
 */
export function addCall(totals: UsageTotals, model: string, call: Buckets, sign: 1 | -1 = 1): void {
  const entry = modelUsage(totals, model);
  // in place: a fold adds every call it closes, and a copy per call was most of its garbage
  addInPlace(entry.all, call, sign);
  if (requestInput(call) > LONG_CONTEXT_THRESHOLD) addInPlace(entry.above_200k, call, sign);
}

/**
 * A model's entry in the totals, created empty when missing. Model names come from transcripts,
 * so they are looked up as own properties only: a model called `constructor` or `__proto__`
 * is a model like any other, not a member of Object.prototype (`??=` found `constructor`
 * already there and failed the fold; `totals['__proto__'] = ...` set the prototype).
 */
export function modelUsage(totals: UsageTotals, model: string): ModelUsage {
  if (Object.hasOwn(totals, model)) return totals[model]!;
  const entry = { all: zeroBuckets(), above_200k: zeroBuckets() };
  Object.defineProperty(totals, model, { value: entry, enumerable: true, writable: true, configurable: true });
  return entry;
}

function addInPlace(into: Buckets, call: Buckets, sign: 1 | -1): void {
  into.input += call.input * sign;
  into.cached_input += call.cached_input * sign;
  into.cache_write += call.cache_write * sign;
  into.cache_write_long += call.cache_write_long * sign;
  into.output += call.output * sign;
  into.reasoning += call.reasoning * sign;
}

export function totalTokens(totals: UsageTotals): number {
  return Object.values(totals).reduce((sum, m) => sum + billableTokens(m.all), 0);
}
