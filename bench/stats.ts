import { availableParallelism, loadavg } from 'node:os';

/** The q-quantile of ascending samples, rounded to `digits` decimals (benches print these). */
export function quantile(sorted: number[], q: number, digits = 3): number {
  const scale = 10 ** digits;
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! * scale) / scale;
}

/** Samples in ascending order, for `quantile`. */
export function ascending(samples: number[]): number[] {
  return [...samples].sort((a, b) => a - b);
}

/** The machine a figure was taken on: its cores and the load while it ran (a shared machine skews ratios). */
export function machine(): { cores: number; load_average_1m: number } {
  return { cores: availableParallelism(), load_average_1m: Math.round(loadavg()[0]! * 100) / 100 };
}
