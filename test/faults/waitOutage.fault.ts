import { randomUUID } from 'node:crypto';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { yoke, type CliResult } from '../helpers/cli';
import { addTestMachines, services, type Services } from '../helpers/fixtures';
import { pollUntil, startTcpProxy, type TcpProxy } from './services';

/**
 * Issue 3 W4 W7 under failure: a session waiting in line with `--wait` keeps waiting through a
 * short Postgres outage. The CLI reaches Postgres only through a TCP proxy that the test stops
 * (refusing new connections, cutting the open ones) and starts again; meanwhile the holder
 * releases and the machine is reserved for the waiter, who takes it once Postgres answers.
 */
let t: TestDatabase;
let proxy: TcpProxy;
let s: Services;

beforeAll(async () => {
  t = await createTestDatabase();
  const pg = new URL(t.url);
  proxy = await startTcpProxy({ host: pg.hostname, port: Number(pg.port || 5432) });
  s = services(t.db);
  for (const id of ['holder', 'waiter']) await s.registerSession({ sessionId: id, actorId: id });
  await addTestMachines(s, ['lab-1']);
}, 60_000);

afterAll(async () => {
  await proxy.stop();
  await t.drop();
});

/** The built CLI, its Postgres behind the proxy. */
function yokeThroughProxy(args: string[]): Promise<CliResult> {
  const db = new URL(t.url);
  db.host = `127.0.0.1:${proxy.port}`;
  return yoke(db.toString(), args, {
    TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!,
    YOKE_TASK_QUEUE: `wait-outage-${randomUUID()}`,
  });
}

test('W7 issue 10 acquire --wait rides out a Postgres outage: the turn reserved meanwhile is taken once Postgres answers (exit 0), not exit 3', async () => {
  const held = await s.acquireCoordinationClaim({ sessionId: 'holder', key: 'QA_HOST:lab-1' });
  const waiting = yokeThroughProxy([
    'coordination-claim',
    'acquire',
    '--key',
    'QA_HOST:lab-1',
    '--wait',
    '--session',
    'waiter',
  ]);
  await pollUntil(
    'the waiter to join the line',
    () => s.listWaits({ testMachine: 'lab-1' }),
    (line) => line.some((w) => w.session_id === 'waiter' && w.state === 'waiting'),
    60,
  );

  await proxy.stop(); // Postgres refuses the waiting CLI now
  await new Promise((r) => setTimeout(r, 2_500)); // at least two of its one-second reads fail
  await s.releaseWorkClaim({ actingSessionId: 'holder', claimId: held.claim.claim_id, reason: 'suite finished' });
  await new Promise((r) => setTimeout(r, 1_000));
  await proxy.start();

  const r = await waiting;
  expect(r.code).toBe(0);
  expect(r.stderr).toContain('Postgres is out of reach');
  expect(r.stdout).toContain('took your reserved turn');
  const live = await s.listCoordinationClaims({ key: 'QA_HOST:lab-1', activeOnly: true });
  expect(live.map((c) => c.session_id)).toEqual(['waiter']);
}, 240_000);
