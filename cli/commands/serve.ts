import type { Command } from 'commander';
import { z } from 'zod';
import { usageError } from '../../domain/errors';
import { nonEmpty, parseOptions, withDb, BaseOptions, wholeNumber } from '../context';

const ServeOptions = BaseOptions.extend({
  port: wholeNumber.pipe(z.number().int().min(0).max(65535)).default(8340),
  host: nonEmpty.default('127.0.0.1'),
  pollMs: wholeNumber.pipe(z.number().int().min(200).max(600_000)).default(2000),
});

/** The Temporal Web UI: YOKE_TEMPORAL_UI_URL, else the one `npm start` recorded, else the dev server's default. */
async function temporalUi(home: string): Promise<string> {
  if (process.env.YOKE_TEMPORAL_UI_URL) return process.env.YOKE_TEMPORAL_UI_URL;
  const { existsSync, readFileSync } = await import('node:fs');
  const { servicesFile } = await import('../../config/paths');
  const file = servicesFile(home);
  if (existsSync(file)) {
    const recorded = JSON.parse(readFileSync(file, 'utf8')) as { webUi?: string | null };
    if (recorded.webUi) return recorded.webUi;
  }
  return `http://127.0.0.1:${process.env.YOKE_TEMPORAL_UI_PORT ?? '8233'}`;
}

/** `yoke serve`: the read-only operator dashboard in the browser. */
export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('the read-only operator dashboard: board, runs, test machines, machines (live, no reload)')
    .option('--port <port>', 'port (0: any free port)', '8340')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option(
      '--session <id>',
      'viewing session (default $YOKE_SESSION_ID): usage cards show only what its actor may read',
    )
    .option('--poll-ms <ms>', 'how often each panel refreshes', '2000')
    .option('--json', 'print the address as JSON')
    .action(async (raw) => {
      const o = parseOptions(ServeOptions, raw);
      const viewerSessionId = o.session ?? process.env.YOKE_SESSION_ID;
      await withDb(async (ctx) => {
        // Refused like every other command (unreachable Postgres, unknown session) before anything listens.
        const { dashboardActivities } = await import('../../activities/dashboard');
        await dashboardActivities({ db: ctx.db }).checkReady(
          viewerSessionId ? { sessionId: viewerSessionId } : undefined,
        );
        const { buildDashboard } = await import('../../web/server');
        const { projectRoot } = await import('../../config/paths');
        const { join } = await import('node:path');
        const app = buildDashboard({
          db: ctx.db,
          driverFreshMs: ctx.readDriverFreshMs,
          temporalUi: await temporalUi(ctx.config.home),
          namespace: ctx.config.temporal.namespace,
          viewerSessionId,
          pollMs: o.pollMs,
          publicDir: join(projectRoot(__dirname), 'web', 'public'),
        });
        try {
          await app.listen({ port: o.port, host: o.host });
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (!['EADDRINUSE', 'EADDRNOTAVAIL', 'EACCES', 'ENOTFOUND', 'EAI_AGAIN'].includes(code ?? '')) throw err;
          // A taken port, an address this machine does not have or a host name that does not
          // resolve is the caller's input, not a bug (nor a Postgres failure).
          throw usageError('listen_address_unavailable', `cannot listen on ${o.host}:${o.port}: ${code}`, {
            recovery: `pick another port (--port ${o.port === 8340 ? 8341 : 8340}, or --port 0 for any free one) or an address of this machine (--host 127.0.0.1)`,
            details: { host: o.host, port: o.port, reason: code },
          });
        }
        const { port } = app.server.address() as { port: number };
        const url = `http://${o.host.includes(':') ? `[${o.host}]` : o.host}:${port}`;
        process.stdout.write(o.json ? `${JSON.stringify({ url, port })}\n` : `yoke dashboard: ${url}\n`);
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
        await app.close();
      });
    });
}
