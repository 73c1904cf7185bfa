import { boardActivities } from '../../activities/board';
import { claimPrimitiveActivities, type ClaimPrimitiveActivities } from '../../activities/claimPrimitives';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { seedLab, services, type Services } from '../helpers/fixtures';
import { releaseDefinition, writeDefinition } from '../helpers/runs';

/** Defects an audit of `yoke board`, `yoke fleet` and `yoke frontier` found, through the real read. */

let t: TestDatabase;
let s: Services;
let p: ClaimPrimitiveActivities;

beforeEach(async () => {
  t = await createTestDatabase();
  s = services(t.db);
  p = claimPrimitiveActivities({ db: t.db });
  await seedLab(s); // projects web (WEB) and api (API); op holds web's steering seat; w1, w2 on web; a1 on api
});
afterEach(async () => {
  await t.drop();
});

const boardOf = (project?: string) => boardActivities({ db: t.db }).board({ project });
const rowOf = async (sessionId: string, table: 'active_sessions' | 'recent_sessions') =>
  (await boardOf())[table].find((r) => r.session_id === sessionId)?.claims;

describe('the Claims column of an ended session', () => {
  test('B7 B5 a session that took the seat three times names only the last seat locks once it ended', async () => {
    await s.registerSession({ sessionId: 'wzother', actorId: 'zed', project: 'api' });
    await s.takeSteeringSeat({ sessionId: 'wzother', project: 'api' });
    await s.releaseSteeringSeat({ sessionId: 'wzother', project: 'api' });
    await s.takeSteeringSeat({ sessionId: 'wzother', project: 'api' });
    await p.lockDocument({ sessionId: 'wzother', document: 'BETA', project: 'api' });
    await p.unlockDocument({ sessionId: 'wzother', document: 'BETA', project: 'api' });
    await s.releaseSteeringSeat({ sessionId: 'wzother', project: 'api' });
    await s.takeSteeringSeat({ sessionId: 'wzother', project: 'api' });
    await p.lockDocument({ sessionId: 'wzother', document: 'GAMMA', project: 'api' });
    await p.unlockDocument({ sessionId: 'wzother', document: 'GAMMA', project: 'api' });
    await s.releaseSteeringSeat({ sessionId: 'wzother', project: 'api' });
    await s.endSession({ sessionId: 'wzother' });
    expect(await rowOf('wzother', 'recent_sessions')).toEqual(['🛞 steering api · GAMMA']);
  });

  test('B2 B7 paths released and taken again count once each in the item total', async () => {
    await s.takeItem({ sessionId: 'w1', item: 'WEB-3' });
    await p.takePaths({ sessionId: 'w1', paths: ['q/1', 'q/2'], item: 'WEB-3' });
    await p.releasePaths({ sessionId: 'w1', paths: ['q/1', 'q/2'], item: 'WEB-3' });
    await p.takePaths({ sessionId: 'w1', paths: ['q/1'], item: 'WEB-3' });
    expect(await rowOf('w1', 'active_sessions')).toEqual(['WEB-3 📁1']);
    await s.endSession({ sessionId: 'w1' });
    expect(await rowOf('w1', 'recent_sessions')).toEqual(['WEB-3 📁2']);
  });

  test('B1 B7 the item path total stays on the most recent epic task when the session ends', async () => {
    await p.takeEpicTask({ sessionId: 'w1', item: 'WEB-1', task: 'T001' });
    await p.releaseEpicTask({ sessionId: 'w1', item: 'WEB-1', task: 'T001' });
    await p.takeEpicTask({ sessionId: 'w1', item: 'WEB-1', task: 'T002' });
    await p.takePaths({ sessionId: 'w1', paths: ['e/1', 'e/2'], item: 'WEB-1' });
    expect(await rowOf('w1', 'active_sessions')).toEqual(['WEB-1 T002 📁2']);
    await s.endSession({ sessionId: 'w1' });
    expect(await rowOf('w1', 'recent_sessions')).toEqual(['WEB-1 T001', 'WEB-1 T002 📁2']);
  });

  test('B1 a session id and machine carrying markup are escaped in BOARD.md', async () => {
    const evil = 'wz<img src=x onerror=alert(1)>';
    await s.registerSession({ sessionId: evil, actorId: 'zed', project: 'web', machine: evil });
    const { markdown } = await boardOf();
    expect(markdown).not.toContain('<img');
    expect(markdown).toContain(
      '| wz&lt;img src=x onerror=alert(1)&gt; | zed | web | wz&lt;img src=x onerror=alert(1)&gt; |',
    );
  });
});

test('B1 Recent Sessions lists every session ended in the last 24 hours, not the latest 50', async () => {
  for (let i = 0; i < 55; i++) {
    await s.registerSession({ sessionId: `e${i}`, actorId: 'eve', project: 'web' });
    await s.endSession({ sessionId: `e${i}` });
  }
  const board = await boardOf();
  expect(board.recent_sessions.filter((r) => r.session_id.startsWith('e'))).toHaveLength(55);
  // A caller may still ask for fewer.
  const few = await boardActivities({ db: t.db, recentLimit: 3 }).board();
  expect(few.recent_sessions).toHaveLength(3);
});

describe('U1 a --project view is cut from the one schedule', () => {
  test('U1 a run driven by a session of another project staffs its items in fleet, frontier and board --project', async () => {
    const apply = projectDefinitionActivities({ db: t.db }).applyProjectDefinition;
    await apply({
      file: writeDefinition(
        releaseDefinition({
          project: 'shop',
          prefix: 'SHOP',
          stageUrl: 'http://stage.shop.test',
          prodUrl: 'https://shop.test',
        }),
      ),
    });
    await s.registerSession({ sessionId: 's1', actorId: 'dana', project: 'web', machine: 'mac-1' });
    const runs = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
    const run = await runs.createRun({
      sessionId: 's1',
      project: 'shop',
      flow: 'release',
      target: 'stage',
      candidate: 'abc1234',
      idempotencyKey: 'u1-other',
      items: ['SHOP-1'],
    });
    await runs.executeRun({ sessionId: 's1', runId: run.run_id });
    const views = boardActivities({ db: t.db, driverFreshMs: 60_000 });

    const everything = await views.fleet();
    expect(everything.find((m) => m.machine_id === 'mac-1')!.sessions).toEqual([
      { session_id: 's1', actor_id: 'dana', project: 'web', staffing: ['SHOP-1'] },
    ]);
    const shop = await views.fleet({ project: 'shop' });
    expect(shop).toEqual([
      {
        machine_id: 'mac-1',
        sessions: [{ session_id: 's1', actor_id: 'dana', project: 'web', staffing: ['SHOP-1'] }],
      },
    ]);
    const frontier = await views.frontier({ project: 'shop' });
    expect(frontier.map((f) => f.item)).not.toContain('SHOP-1');
    expect(frontier.every((f) => f.project === 'shop')).toBe(true);
    expect((await views.frontier()).filter((f) => f.project === 'shop')).toEqual(frontier);

    const board = await views.board({ project: 'shop' });
    expect(board.schedule.staffing.find((x) => x.item === 'SHOP-1')).toMatchObject({
      session_id: 's1',
      basis: 'pinned_run_driver',
      run_id: run.run_id,
    });
    expect(board.schedule.staffing.every((x) => x.project === 'shop')).toBe(true);
    expect(board.active_sessions.find((r) => r.session_id === 's1')!.staffing).toEqual(['SHOP-1']);
    // Sessions with nothing in shop stay out of its view.
    expect(board.active_sessions.map((r) => r.session_id)).toEqual(['s1']);
  });
});
