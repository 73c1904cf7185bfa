import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { dashboardActivities } from '../activities/dashboard';
import { runWorkflowId, waitWorkflowId } from '../workflows/definitions';

export interface DashboardOptions {
  db: Parameters<typeof dashboardActivities>[0]['db'];
  /**
   * R1: the deployment's driver freshness, asked on every panel read: the worker records it when
   * it starts, and a dashboard outlives a worker restarted with another value.
   */
  driverFreshMs: () => Promise<number>;
  /** The Temporal Web UI every run and wait links to. */
  temporalUi: string;
  namespace: string;
  /** U13: the viewing session whose actor's grants bound the usage cards. */
  viewerSessionId?: string;
  /** How often the page polls each panel's JSON endpoint. */
  pollMs: number;
  /** Where index.html, app.js and style.css live (served as they are: no build step). */
  publicDir: string;
}

const STATIC: Record<string, string> = {
  '/': 'index.html',
  '/app.js': 'app.js',
  '/style.css': 'style.css',
};
const TYPES: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
};

/**
 * The read-only operator dashboard: one JSON endpoint per panel, polled by the page, and the
 * page itself. Every run and wait carries a link to its workflow in the Temporal Web UI.
 */
export function buildDashboard(opts: DashboardOptions): FastifyInstance {
  const app = Fastify({ logger: false });
  const panels = async () => dashboardActivities({ db: opts.db, driverFreshMs: await opts.driverFreshMs() });
  const workflowUrl = (workflowId: string) =>
    `${opts.temporalUi.replace(/\/$/, '')}/namespaces/${encodeURIComponent(opts.namespace)}/workflows/${encodeURIComponent(workflowId)}`;

  const paths = new Set<string>();
  app.addHook('onRoute', (route) => void paths.add(route.url));

  for (const [route, file] of Object.entries(STATIC)) {
    app.get(route, async (_req, reply) => {
      // Read on each request: an edited page shows on reload, with nothing to rebuild.
      reply.header('cache-control', 'no-store').type(TYPES[file]!);
      return readFileSync(join(opts.publicDir, file), 'utf8');
    });
  }
  app.get('/api/config', async () => ({
    poll_ms: opts.pollMs,
    temporal_ui: opts.temporalUi,
    namespace: opts.namespace,
    viewer_session_id: opts.viewerSessionId ?? null,
  }));
  app.get('/api/board', async () => (await panels()).boardPanel());
  app.get('/api/runs', async () =>
    (await (await panels()).runsPanel()).map((r) => ({ ...r, workflow_url: workflowUrl(runWorkflowId(r.run_id)) })),
  );
  app.get('/api/test-machines', async () =>
    (await (await panels()).testMachinesPanel()).map((m) => ({
      ...m,
      line: m.line.map((w) => ({ ...w, workflow_url: workflowUrl(waitWorkflowId(m.name, w.session_id)) })),
    })),
  );
  app.get('/api/machines', async () => (await panels()).fleetPanel());
  app.get('/api/machines/usage', async () =>
    (await panels()).machinesUsagePanel(opts.viewerSessionId ? { sessionId: opts.viewerSessionId } : undefined),
  );
  // Every route is a read: another method on a known path is 405 with the methods it takes, so a
  // client that posts to a panel learns the dashboard is read-only rather than that the path is gone.
  app.setNotFoundHandler(async (req, reply) => {
    const path = req.url.split('?')[0]!;
    if (paths.has(path)) {
      reply.status(405).header('allow', 'GET, HEAD');
      return {
        error: { code: 'method_not_allowed', message: `${req.method} ${path}: the dashboard is read-only; use GET` },
      };
    }
    reply.status(404);
    return { error: { code: 'not_found', message: `${req.method} ${path}: no such dashboard page or endpoint` } };
  });
  app.setErrorHandler(async (err: Error & { code?: string; statusCode?: number }, _req, reply) => {
    // A request Fastify itself refused (a malformed or oversized body) keeps its 4xx: the caller's input, not a fault.
    const clientError = err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500;
    reply.status(err.code === 'session_not_registered' ? 400 : clientError ? err.statusCode! : 500);
    return { error: { code: err.code ?? 'internal_error', message: err.message } };
  });
  return app;
}
