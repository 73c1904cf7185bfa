import type { ModelRates, PricingRevision } from '../../domain/usage/pricing';
import { GENAI_PRICES_REVISION } from './shippedGenaiPrices';

/**
 * The first revision shipped with yoke, from the price table in shared/spec/usage-formats.md
 * (public LiteLLM prices at the time of writing). It is data, one revision among others:
 * `yoke pricing import FILE` adds newer ones with their own effective dates.
 */
const sonnet: ModelRates = { input: 3, cached_input: 0.3, cache_write: 3.75, cache_write_long: 6, output: 15 };
const sonnet4: ModelRates = { ...sonnet, above_200k: { input: 6, cached_input: 0.6, cache_write: 7.5, output: 22.5 } };
const opus41: ModelRates = { input: 15, cached_input: 1.5, cache_write: 18.75, cache_write_long: 30, output: 75 };
const opus45: ModelRates = { input: 5, cached_input: 0.5, cache_write: 6.25, cache_write_long: 10, output: 25 };
const gpt5: ModelRates = { input: 1.25, cached_input: 0.125, output: 10 };
const gpt52: ModelRates = { input: 1.75, cached_input: 0.175, output: 14 };

export const SEED_REVISION: PricingRevision = {
  revision_id: 'litellm-2025-12',
  effective_at: '2025-01-01T00:00:00.000Z',
  estimated: false,
  rates: {
    'claude-sonnet-4-20250514': sonnet4,
    'claude-sonnet-4-5': sonnet,
    'claude-sonnet-4-6': sonnet,
    'claude-opus-4-20250514': opus41,
    'claude-opus-4-1': opus41,
    'claude-opus-4-5': opus45,
    'claude-opus-4-6': opus45,
    'claude-opus-4-7': opus45,
    'claude-opus-4-8': opus45,
    'gpt-5': gpt5,
    'gpt-5-codex': gpt5,
    'gpt-5.1-codex': gpt5,
    'gpt-5.1-codex-max': gpt5,
    'gpt-5.2-codex': gpt52,
    'gpt-5.3-codex': gpt52,
    'gpt-5.1-codex-mini': { input: 0.25, cached_input: 0.025, output: 2 },
  },
};

/**
 * Every revision yoke ships, oldest first. Revisions are immutable: a refreshed price list
 * (`npm run pricing:snapshot` after upgrading @pydantic/genai-prices) is added here as a new
 * revision with a later effective date; the older ones stay, so sessions they priced keep
 * their cost.
 */
export const SHIPPED_REVISIONS: PricingRevision[] = [SEED_REVISION, GENAI_PRICES_REVISION];
