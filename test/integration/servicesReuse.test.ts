import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from '../../config/yokeConfig';
import { freePort } from '../../scripts/net';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

/**
 * Issue 1: `npm start` reuses a Temporal server that already answers on its port (the real
 * services script, against the tests' headless dev server), and records a Web UI only when one
 * answers: a server it did not start may have none, or serve it on another port.
 */
const services = join(projectRoot(__dirname), 'dist', 'scripts', 'services.js');
let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  await t.drop();
});

async function up(uiPort: number): Promise<{ webUi: string | null; temporalAddress: string; log: string }> {
  const home = mkdtempSync(join(tmpdir(), 'yoke-reuse-'));
  const temporalPort = process.env.YOKE_TEST_TEMPORAL_ADDRESS!.split(':').pop()!;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: t.url,
    YOKE_HOME: home,
    YOKE_TEMPORAL_PORT: temporalPort,
  };
  delete env.TEMPORAL_ADDRESS;
  const { stdout, stderr } = await promisify(execFile)(process.execPath, [services, 'up', '--owner', 'reuse-test'], {
    env: { ...env, YOKE_TEMPORAL_UI_PORT: String(uiPort) },
  });
  await promisify(execFile)(process.execPath, [services, 'down', '--owner', 'reuse-test'], { env });
  const recorded = JSON.parse(readFileSync(join(home, 'services.json'), 'utf8')) as {
    webUi: string | null;
    temporalAddress: string;
  };
  return { webUi: recorded.webUi, temporalAddress: recorded.temporalAddress, log: stdout + stderr };
}

test('issue 1 npm start reusing a Temporal server names no Web UI where none answers, and names one that does', async () => {
  const silent = await freePort();
  const none = await up(silent);
  expect(none.temporalAddress).toBe(`127.0.0.1:${process.env.YOKE_TEST_TEMPORAL_ADDRESS!.split(':').pop()}`);
  expect(none.log).toContain('reusing the server');
  expect(none.log).toContain(`no Web UI answers on http://127.0.0.1:${silent}`);
  expect(none.webUi).toBeNull();

  const ui: Server = createServer((socket) => socket.end());
  await new Promise<void>((resolve) => ui.listen(0, '127.0.0.1', resolve));
  try {
    const port = (ui.address() as { port: number }).port;
    expect((await up(port)).webUi).toBe(`http://127.0.0.1:${port}`);
  } finally {
    await new Promise((resolve) => ui.close(resolve));
  }
});
