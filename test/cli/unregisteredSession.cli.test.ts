import { sessionActivities } from '../../activities/sessions';
import { testMachineActivities } from '../../activities/testMachines';
import { jsonError, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines } from '../helpers/fixtures';
import { applyWebRelease, releaseRuns } from '../helpers/runs';
import { deploymentRunActivities } from '../../activities/deploymentRuns';

/**
 * C1 W8: a command that acts as a session refuses an unregistered or ended one first, naming it,
 * whatever else it would need: a check refuses before it waits for a worker (Temporal here has
 * none), a watch before it follows anything (it used to retry its heartbeat in silence).
 */
let t: TestDatabase;
const run = (args: string[]) =>
  yoke(t.url, [...args, '--json'], { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS! });
const runs = () => deploymentRunActivities({ db: t.db });
const { createdRun } = releaseRuns(runs);
let runId: string;

beforeAll(async () => {
  t = await createTestDatabase();
  await applyWebRelease(t.db);
  const sessions = sessionActivities({ db: t.db });
  await sessions.registerSession({ sessionId: 'd1', actorId: 'driver', project: 'web' });
  await sessions.registerSession({ sessionId: 'gone', actorId: 'driver', project: 'web' });
  await sessions.endSession({ sessionId: 'gone', reason: 'done for the day' });
  await addTestMachines(testMachineActivities({ db: t.db }), ['lab-1']);
  runId = await createdRun('a1b2c3d4e5f6');
}, 60_000);

afterAll(async () => {
  await t.drop();
});

const commands = (session: string): string[][] => [
  ['test-machine', 'verify', 'lab-1', '--session', session],
  ['test-machine', 'golden-capture', 'lab-1', '--session', session],
  ['qa', 'watch', '1', '--session', session, '--timeout', '5'],
  ['deployment-runs', 'watch', 'RUN', '--session', session, '--timeout', '5'],
];

test.each(commands('ghost'))(
  'C1 W8 yoke %s %s refuses an unregistered session before anything else',
  async (...args) => {
    const r = await run(args.map((a) => (a === 'RUN' ? runId : a)));
    expect(r.code).toBe(1);
    expect(jsonError(r)).toMatchObject({
      code: 'session_not_registered',
      details: { session_id: 'ghost' },
      recovery: expect.stringContaining('yoke sessions register --session ghost'),
    });
  },
);

test.each(commands('gone'))('C1 W8 yoke %s %s refuses an ended session before anything else', async (...args) => {
  const r = await run(args.map((a) => (a === 'RUN' ? runId : a)));
  expect(r.code).toBe(1);
  expect(jsonError(r)).toMatchObject({ code: 'session_ended', details: { session_id: 'gone' } });
});
