/**
 * S3: a settlement effect that failed and has not been applied since. It keeps the run settling
 * until a replay applies it; `get` and `watch` name each one with its error.
 */
export interface EffectState {
  item: string;
  effect: string;
  applied_at: string | null;
  last_error: string | null;
}

/** "ITEM effect: error" for each failing effect, joined; empty when none fails. */
export function failingEffectsText(effects: EffectState[]): string {
  return effects
    .filter((e) => !e.applied_at && e.last_error)
    .map((e) => `${e.item} ${e.effect}: ${e.last_error}`)
    .join('; ');
}
