import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { buildDashboard } from '../../web/server';

/**
 * A dashboard listening on a free loopback port, with the options the request tests share.
 * `driverFreshMs` is asked at every read, so a test can change the freshness in force.
 */
export async function listeningDashboard(
  db: Kysely<Database>,
  driverFreshMs: () => number = () => 600_000,
): Promise<{ url: (path: string) => string; close: () => Promise<void> }> {
  const app = buildDashboard({
    db,
    driverFreshMs: async () => driverFreshMs(),
    temporalUi: 'http://127.0.0.1:8233',
    namespace: 'default',
    pollMs: 2000,
    publicDir: __dirname,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  return { url: (path) => `http://127.0.0.1:${port}${path}`, close: () => app.close() };
}
