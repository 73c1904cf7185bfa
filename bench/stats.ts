/** The q-quantile of ascending samples, rounded to `digits` decimals (benches print these). */
export function quantile(sorted: number[], q: number, digits = 3): number {
  const scale = 10 ** digits;
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! * scale) / scale;
}

/** Samples in ascending order, for `quantile`. */
export function ascending(samples: number[]): number[] {
  return [...samples].sort((a, b) => a - b);
}
