import { usageError } from './errors';

/**
 * O1/O3: the unit a run occupies is its environment's origin, scheme://host[:port]
 * lowercased, with the scheme's default port dropped, so environments that resolve to one
 * server are one unit. An environment with no url (a preview) occupies its own slug.
 */
const DEFAULT_PORTS: Record<string, string> = { 'http:': '80', 'https:': '443' };

export function normalizeOrigin(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw usageError('invalid_environment_url', `"${url}" is not an absolute URL`, {
      recovery: 'give the environment a url like https://stage.example.com',
      details: { url },
    });
  }
  const scheme = u.protocol.toLowerCase();
  const port = u.port && u.port !== DEFAULT_PORTS[scheme] ? `:${u.port}` : '';
  return `${scheme}//${u.hostname.toLowerCase()}${port}`;
}

export interface EnvironmentAddress {
  url: string | null;
  preview_slug: string | null;
  project: string;
  name: string;
}

export function occupancyUnit(env: EnvironmentAddress): string {
  if (env.url) return normalizeOrigin(env.url);
  return `preview:${env.project}/${env.preview_slug ?? env.name}`;
}
