import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { GENAI_PROVIDERS, type GenaiProvider } from '../../domain/usage/genaiPrices';

/**
 * The installed `@pydantic/genai-prices`: its version and the bundled provider data (read
 * from the package itself, never fetched: `updatePrices` is not called). Loaded only by the
 * commands that import prices.
 */
export function installedGenaiPrices(): { version: string; providers: GenaiProvider[] } {
  const lib = require('@pydantic/genai-prices') as {
    findProvider(o: { providerId: string }): GenaiProvider | undefined;
  };
  const manifest = JSON.parse(
    // the package exports no ./package.json: it sits beside dist/
    readFileSync(join(dirname(require.resolve('@pydantic/genai-prices')), '..', 'package.json'), 'utf8'),
  ) as {
    version: string;
  };
  const providers = GENAI_PROVIDERS.map((id) => lib.findProvider({ providerId: id })).filter(
    (p): p is GenaiProvider => !!p,
  );
  return { version: manifest.version, providers };
}
