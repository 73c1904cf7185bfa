import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke } from '../helpers/cli';

let t: TestDatabase;
const run = (args: string[], session = 'w1') => yoke(t.url, args, { YOKE_SESSION_ID: session });

beforeAll(async () => {
  t = await createTestDatabase();
  await setUp(run, [
    ['projects', 'create', 'yoke', '--prefix', 'YOKE'],
    ['sessions', 'register', '--session', 'op', '--actor', 'ops', '--project', 'yoke', '--machine', 'm0'],
    ['sessions', 'register', '--session', 'w1', '--actor', 'alice', '--project', 'yoke', '--machine', 'm1'],
    ['sessions', 'register', '--session', 'w2', '--actor', 'bob', '--project', 'yoke'],
  ]);
});
afterAll(async () => {
  await t.drop();
});

test('B1 yoke claims epic-task|process|path|doc take and release, each refused claim_held for a second session', async () => {
  await setUp(run, [
    ['claims', 'item', 'take', 'YOKE-1'],
    ['claims', 'epic-task', 'take', 'YOKE-2', 'T008'],
    ['claims', 'process', 'take', 'FEED'],
    ['claims', 'path', 'take', 'src/a.ts', 'src/b.ts', '--item', 'YOKE-1'],
    ['claims', 'path', 'take', 'feed/x', '--process', 'FEED'],
  ]);
  await setUp(
    (a) => run(a, 'op'),
    [
      ['claims', 'steering', 'take', '--project', 'yoke'],
      ['claims', 'doc', 'lock', 'CURRENT-PLAN', '--project', 'yoke'],
    ],
  );
  // Every kind's refusal is proven against the activities (test/integration/board.test.ts); here two through the binary.
  for (const args of [
    ['claims', 'path', 'take', 'src/b.ts', '--json'],
    ['claims', 'doc', 'lock', 'CURRENT-PLAN', '--project', 'yoke', '--json'],
  ]) {
    const r = await run(args, 'w2');
    expect({ args, code: r.code }).toEqual({ args, code: 1 });
    expect(jsonError(r).code).toBe('claim_held');
  }
  const paths = json(await run(['claims', 'path', 'take', 'src/c.ts', '--item', 'YOKE-1', '--json']));
  expect(paths).toMatchObject({ declared_paths: 1, item: 'YOKE-1' });
  const bad = await run(['claims', 'epic-task', 'take', 'YOKE-2', 'task8', '--json']);
  expect(bad.code).toBe(2);
  expect(jsonError(bad).details).toMatchObject({ option: 'TASK' });

  const board = json(await run(['board', '--json']));
  const row = (id: string) => board.active_sessions.find((r: { session_id: string }) => r.session_id === id).claims;
  expect(row('w1')).toEqual(['YOKE-1 📁3', 'YOKE-2 T008', '⚙ FEED', '📁1 (⚙ FEED)']);
  expect(row('op')).toEqual(['🛞 steering yoke · CURRENT-PLAN']);

  const detail = json(await run(['path-claims', 'list', '--item', 'YOKE-1', '--active-only', '--json']));
  expect(detail.map((c: { path: string }) => c.path)).toEqual(['src/a.ts', 'src/b.ts', 'src/c.ts']);

  await setUp(run, [
    ['claims', 'path', 'release', 'src/a.ts', 'src/b.ts', 'src/c.ts', '--item', 'YOKE-1', '--reason', 'merged'],
    ['claims', 'epic-task', 'release', 'YOKE-2', 'T008'],
    ['claims', 'process', 'release', 'FEED'],
  ]);
  await setUp((a) => run(a, 'op'), [['claims', 'doc', 'unlock', 'CURRENT-PLAN', '--project', 'yoke']]);
  const after = json(await run(['board', '--json']));
  expect(after.active_sessions.find((r: { session_id: string }) => r.session_id === 'w1').claims).toEqual([
    'YOKE-1',
    '📁1 (⚙ FEED)',
  ]);
}, 600_000); // about twenty CLI processes on a shared two-core machine

test('B1 yoke board writes BOARD.md with both tables; --project narrows it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-board-'));
  const out = join(dir, 'BOARD.md');
  const r = await run(['board', '--out', out]);
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(`wrote ${out}`);
  const md = readFileSync(out, 'utf8');
  expect(md).toContain('## Active Harness Sessions');
  expect(md).toContain('## Recent Sessions');
  expect(md).toMatch(/\| w1 \| alice \| yoke \| m1 \|.*<kbd>YOKE-1<\/kbd>/);
  const human = await run(['board']);
  expect(human.stdout).toContain('## Active Harness Sessions');
  const missing = await run(['board', '--project', 'nope', '--json']);
  expect(missing.code).toBe(1);
  expect(jsonError(missing).code).toBe('project_not_found');
});

test('U1 fleet and frontier come from the same schedule as the board', async () => {
  const fleet = json(await run(['fleet', '--json']));
  expect(fleet.find((m: { machine_id: string }) => m.machine_id === 'm1').sessions).toEqual([
    { session_id: 'w1', actor_id: 'alice', project: 'yoke', staffing: ['YOKE-1'] },
  ]);
  const frontier = json(await run(['frontier', '--json']));
  expect(frontier).toEqual([{ item: 'YOKE-2', project: 'yoke' }]);
});

test('U13 sessions list --usage-last-24h and machines usage honour the viewing session', async () => {
  await setUp(run, [
    ['projects', 'create', 'other', '--prefix', 'OTH'],
    ['sessions', 'register', '--session', 'x1', '--actor', 'xena', '--project', 'other', '--machine', 'm9'],
  ]);
  const cohort = (session: string) =>
    run(['sessions', 'list', '--usage-last-24h', '--json'], session).then((r) =>
      json<{ session_id: string }[]>(r).map((s) => s.session_id),
    );
  expect(await cohort('w1')).not.toContain('x1'); // alice holds no grant on "other"
  expect(await cohort('x1')).toContain('x1');
  const machines = json<{ machine_id: string }[]>(await run(['machines', 'usage', '--session', 'w1', '--json']));
  expect(machines.map((m) => m.machine_id)).not.toContain('m9');
  await setUp(run, [['projects', 'grant', 'other', '--actor', 'alice', '--permission', 'project.read']]);
  expect(await cohort('w1')).toContain('x1');
}, 240_000);
