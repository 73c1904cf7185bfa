import { sql } from 'kysely';
import { boardActivities } from '../../activities/board';
import { claimPrimitiveActivities, type ClaimPrimitiveActivities } from '../../activities/claimPrimitives';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { readBoard } from '../../db/board';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, seedLab, services, type Services } from '../helpers/fixtures';
import { releaseDefinition, writeDefinition } from '../helpers/runs';

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
const rowOf = async (sessionId: string, table: 'active_sessions' | 'recent_sessions' = 'active_sessions') =>
  (await boardOf())[table].find((r) => r.session_id === sessionId)?.claims;

describe('every claim primitive the board shows can be taken, exclusively', () => {
  test('B1 C3 epic task, process, path and document claims: a second session is refused claim_held by the index', async () => {
    await p.takeEpicTask({ sessionId: 'w1', item: 'WEB-3', task: 'T008' });
    await p.takeProcess({ sessionId: 'w1', processKey: 'FEED' });
    await p.takePaths({ sessionId: 'w1', paths: ['src/a.ts'], item: 'WEB-3' });
    await p.lockDocument({ sessionId: 'op', document: 'MISSION', project: 'web' });
    const refusals = await Promise.all([
      refusalOf(p.takeEpicTask({ sessionId: 'w2', item: 'WEB-3', task: 'T008' })),
      refusalOf(p.takeProcess({ sessionId: 'w2', processKey: 'FEED', project: 'web' })),
      refusalOf(p.takePaths({ sessionId: 'w2', paths: ['./src/a.ts'] })),
      refusalOf(p.lockDocument({ sessionId: 'w2', document: 'MISSION', project: 'web' })),
    ]);
    expect(refusals.map((r) => r.code)).toEqual(['claim_held', 'claim_held', 'claim_held', 'claim_held']);
    expect(refusals.map((r) => (r.details.holder as { session_id: string }).session_id)).toEqual([
      'w1',
      'w1',
      'w1',
      'op',
    ]);
    // Other units are free: another task, the same process key in another project, another path, the same document name in api.
    await p.takeEpicTask({ sessionId: 'w2', item: 'WEB-3', task: 'T009' });
    await p.takeProcess({ sessionId: 'a1', processKey: 'FEED' });
    await p.takePaths({ sessionId: 'w2', paths: ['src/b.ts'] });
    await p.lockDocument({ sessionId: 'a1', document: 'MISSION', project: 'api' });
  });

  test('C3 a session re-enters a path only for the item it holds it for: for another item it is refused claim_held naming that item, nothing taken', async () => {
    await p.takePaths({ sessionId: 'w1', paths: ['src/own.ts'], item: 'WEB-3' });
    const again = await p.takePaths({ sessionId: 'w1', paths: ['src/own.ts'], item: 'WEB-3' });
    expect(again.reentered_claim_ids).toHaveLength(1);
    const refused = await refusalOf(
      p.takePaths({ sessionId: 'w1', paths: ['src/new.ts', 'src/own.ts'], item: 'WEB-1' }),
    );
    expect(refused.code).toBe('claim_held');
    expect(refused.message).toContain('for item WEB-3');
    expect(refused.details.holder).toMatchObject({ session_id: 'w1', item: 'WEB-3' });
    // all or nothing: the free path of the refused take was not kept
    await expect(p.takePaths({ sessionId: 'w2', paths: ['src/new.ts'] })).resolves.toBeDefined();
  });

  test('C3 twenty sessions racing for one path, process and document: exactly one holder each', async () => {
    for (let i = 0; i < 20; i++) await s.registerSession({ sessionId: `r${i}`, actorId: `r${i}`, project: 'web' });
    const racers = Array.from({ length: 20 }, () => claimPrimitiveActivities({ db: t.connect(1) }));
    const settle = (f: (a: ClaimPrimitiveActivities, i: number) => Promise<unknown>) =>
      Promise.allSettled(racers.map((a, i) => f(a, i)));
    const results = await Promise.all([
      settle((a, i) => a.takePaths({ sessionId: `r${i}`, paths: ['db/schema.sql', `own-${i}`] })),
      settle((a, i) => a.takeProcess({ sessionId: `r${i}`, processKey: 'NIGHTLY' })),
      settle((a, i) => a.lockDocument({ sessionId: `r${i}`, document: 'PLAN', project: 'web' })),
    ]);
    for (const r of results) expect(r.filter((x) => x.status === 'fulfilled')).toHaveLength(1);
    const live = await sql<{ kind: string; n: number }>`
      SELECT target_kind AS kind, count(*)::int AS n FROM work_claims WHERE released_at IS NULL
         AND (scope->>'path' = 'db/schema.sql' OR scope->>'process_key' = 'NIGHTLY' OR scope->>'document' = 'PLAN')
       GROUP BY 1 ORDER BY 1`.execute(t.db);
    expect(live.rows).toEqual([
      { kind: 'path_claim', n: 1 },
      { kind: 'process', n: 1 },
      { kind: 'strategy_doc_claim', n: 1 },
    ]);
    // All or nothing: the losers of the path race hold none of their own paths either.
    expect((await p.listPathClaims({ activeOnly: true })).filter((c) => c.path.startsWith('own-'))).toHaveLength(1);
  });

  test('C1 C5 re-entry heartbeats; release keeps the reason; session end frees them (not sticky)', async () => {
    const first = await p.takeProcess({ sessionId: 'w1', processKey: 'FEED' });
    const again = await p.takeProcess({ sessionId: 'w1', processKey: 'FEED' });
    expect(again).toMatchObject({ reentered: true, claim: { claim_id: first.claim.claim_id } });
    const released = await p.releaseProcess({ sessionId: 'w1', processKey: 'FEED', reason: 'feed rebuilt' });
    expect(released).toMatchObject({
      release_reason: 'feed rebuilt',
      released_by_session_id: 'w1',
      released_by_actor_id: 'alice',
    });
    expect((await refusalOf(p.releaseProcess({ sessionId: 'w1', processKey: 'FEED' }))).code).toBe('claim_not_held');

    await p.takeEpicTask({ sessionId: 'w1', item: 'WEB-2', task: 'T001' });
    const paths = await p.takePaths({ sessionId: 'w1', paths: ['a', 'b', 'a'], item: 'WEB-2' });
    expect(paths.declared_paths).toBe(2);
    await p.lockDocument({ sessionId: 'w1', document: 'MISSION', project: 'web' });
    const end = await s.endSession({ sessionId: 'w1' });
    expect(end.released_claims.map((c) => c.target_kind).sort()).toEqual([
      'epic_task',
      'path_claim',
      'path_claim',
      'strategy_doc_claim',
    ]);
    expect(end.retained_sticky_claims).toEqual([]);
  });

  test('path claims per file: path-claims list --item shows each file; release by path', async () => {
    await p.takePaths({ sessionId: 'w1', paths: ['x/1', 'x/2', 'x/3'], item: 'WEB-5' });
    expect((await p.listPathClaims({ item: 'WEB-5', activeOnly: true })).map((c) => c.path)).toEqual([
      'x/1',
      'x/2',
      'x/3',
    ]);
    await p.releasePaths({ sessionId: 'w1', paths: ['x/2'], item: 'WEB-5' });
    expect((await p.listPathClaims({ item: 'WEB-5', activeOnly: true })).map((c) => c.path)).toEqual(['x/1', 'x/3']);
    expect((await refusalOf(p.takePaths({ sessionId: 'w1', paths: ['../etc/passwd'] }))).code).toBe('invalid_argument');
  });

  test('issue 15 B8: path-claims list --item naming an item nobody recorded refuses item_unknown and records no item', async () => {
    const refused = await refusalOf(p.listPathClaims({ item: 'WEB-998' }));
    expect(refused).toMatchObject({ code: 'item_unknown', details: { item: 'WEB-998' } });
    const recorded = await t.db.selectFrom('backlog_items').select('number').where('number', '=', 998).execute();
    expect(recorded).toEqual([]);
  });

  test('issue 15 C1: releasing paths is all or nothing, as taking them is: a path not held refuses claim_not_held naming it and releases none', async () => {
    await p.takePaths({ sessionId: 'w1', paths: ['x/1', 'x/2'], item: 'WEB-5' });
    const refused = await refusalOf(p.releasePaths({ sessionId: 'w1', paths: ['x/1', 'x/9'], item: 'WEB-5' }));
    expect(refused).toMatchObject({ code: 'claim_not_held', details: { session_id: 'w1', not_held: ['x/9'] } });
    expect(refused.message).toContain('x/9');
    expect(refused.message).not.toContain('x/1');
    expect((await p.listPathClaims({ item: 'WEB-5', activeOnly: true })).map((c) => c.path)).toEqual(['x/1', 'x/2']);
    // every path held: all released
    const released = await p.releasePaths({ sessionId: 'w1', paths: ['x/1', 'x/2'], item: 'WEB-5' });
    expect(released.map((c) => c.released_at !== null)).toEqual([true, true]);
  });
});

describe('the board from the one read', () => {
  test('B1 B2 B4 real claims render in the shapes and order of the table', async () => {
    await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    await p.takePaths({ sessionId: 'w1', paths: ['docs/x.md'], item: 'WEB-9' });
    await p.takePaths({ sessionId: 'w1', paths: ['feed/a', 'feed/b', 'feed/c'], process: 'FEED' });
    await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    await p.takePaths({ sessionId: 'w1', paths: ['src/a', 'src/b'], item: 'WEB-1' });
    await p.takePaths({ sessionId: 'w1', paths: ['src/c'], item: 'WEB-1' });
    await p.takeEpicTask({ sessionId: 'w1', item: 'WEB-4', task: 'T008' });
    await p.takeProcess({ sessionId: 'w1', processKey: 'FEED' });
    await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:primary',
      project: 'web',
      item: 'WEB-1',
    });
    expect(await rowOf('w1')).toEqual([
      'WEB-1 📁3',
      'WEB-4 T008',
      '⚙ FEED',
      '📁1 (WEB-9)',
      '📁3 (⚙ FEED)',
      '🔒 QA_HOST:lab-1',
      '🔒 LIVE_DB_MIGRATION:primary (WEB-1)',
    ]);
  });

  test('B5 the pairing read: a current seat names current locks of its own project only; an unpaired lock keeps its keycap', async () => {
    await p.lockDocument({ sessionId: 'op', document: 'CURRENT-PLAN', project: 'web' });
    await s.takeSteeringSeat({ sessionId: 'a1', project: 'api' });
    await p.lockDocument({ sessionId: 'op', document: 'MISSION', project: 'api' }); // op has no api seat
    expect(await rowOf('op')).toEqual(['🛞 steering web · CURRENT-PLAN', '🛞 api · MISSION']);
    expect(await rowOf('a1')).toEqual(['🛞 steering api']);
  });

  test('B5 a released seat names the released locks whose hold windows overlapped it', async () => {
    await p.lockDocument({ sessionId: 'op', document: 'MISSION', project: 'web' });
    await p.unlockDocument({ sessionId: 'op', document: 'MISSION', project: 'web' });
    await s.releaseSteeringSeat({ sessionId: 'op', project: 'web' });
    await p.lockDocument({ sessionId: 'op', document: 'LATER', project: 'web' }); // after the seat: no overlap
    await s.endSession({ sessionId: 'op' });
    expect(await rowOf('op', 'recent_sessions')).toEqual(['🛞 steering web · MISSION', '🛞 web · LATER']);
  });

  test('B7 B8 active rows drop released path and coordination claims; recent rows collapse repeats to one keycap', async () => {
    await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    await s.releaseItem({ sessionId: 'w1', item: 'WEB-1' });
    await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    await p.takePaths({ sessionId: 'w1', paths: ['gone'], item: 'WEB-2' });
    await p.releasePaths({ sessionId: 'w1', paths: ['gone'], item: 'WEB-2' });
    const host = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2' });
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: host.claim.claim_id, reason: 'suite done' });
    await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2' });
    expect(await rowOf('w1')).toEqual(['WEB-1', '🔒 QA_HOST:lab-2']);
    const again = (await s.listClaims({ sessionId: 'w1', activeOnly: true })).find((c) => c.key === 'QA_HOST:lab-2')!;
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: again.claim_id, reason: 'suite done' });
    await s.endSession({ sessionId: 'w1' });
    const board = await boardOf();
    expect(board.recent_sessions.find((r) => r.session_id === 'w1')!.claims).toEqual([
      'WEB-1',
      '📁1 (WEB-2)',
      '🔒 QA_HOST:lab-2',
    ]);
    expect(board.markdown).not.toContain('suite done');
    expect(board.markdown).not.toContain('gone');
  });

  test('W7 B1 a turn reserved for the oldest waiter shows as reserved on its row, text and JSON, until the waiter takes it', async () => {
    const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1', join: { resumeCommand: 'yoke again' } }),
    );
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'suite done' });
    const turn = (await s.listClaims({ sessionId: 'w2', activeOnly: true })).find((c) => c.key === 'QA_HOST:lab-1')!;
    expect(turn.reserved_until).not.toBeNull();
    const keycap = `⏳ QA_HOST:lab-1 reserved until ${turn.reserved_until!.slice(0, 19)}Z`;
    const board = await boardOf();
    const w2 = board.active_sessions.find((r) => r.session_id === 'w2')!;
    expect(w2.claims).toEqual([keycap]);
    expect(w2.reserved_claims).toEqual([
      { claim_id: turn.claim_id, key: 'QA_HOST:lab-1', reserved_until: expect.any(String), keycap },
    ]);
    expect(Date.parse(w2.reserved_claims[0]!.reserved_until)).toBe(Date.parse(turn.reserved_until!));
    expect(board.markdown).toContain(`<kbd>${keycap}</kbd>`);
    expect(board.markdown).not.toContain('🔒 QA_HOST:lab-1');
    expect(await rowOf('w1')).toEqual([]);

    // The waiter takes its turn: now it holds the machine.
    await s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1' });
    const taken = (await boardOf()).active_sessions.find((r) => r.session_id === 'w2')!;
    expect({ claims: taken.claims, reserved: taken.reserved_claims }).toEqual({
      claims: ['🔒 QA_HOST:lab-1'],
      reserved: [],
    });
  });

  test('W7 B1 B8 a turn never taken is no past hold: once its waiter has ended, the Recent Sessions row shows neither the reservation nor a hold', async () => {
    const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1', join: { resumeCommand: 'yoke again' } }),
    );
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'suite done' });
    await s.takeItem({ sessionId: 'w2', item: 'WEB-9' });
    await s.endSession({ sessionId: 'w2' }); // its turn is released untaken
    const row = (await boardOf()).recent_sessions.find((r) => r.session_id === 'w2')!;
    expect({ claims: row.claims, reserved: row.reserved_claims }).toEqual({ claims: ['WEB-9'], reserved: [] });
    // a turn that was taken is a past hold like any other
    await s.registerSession({ sessionId: 'w3', actorId: 'w3', project: 'web' });
    const again = await s.acquireCoordinationClaim({ sessionId: 'w3', key: 'QA_HOST:lab-1' });
    await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1', join: { resumeCommand: 'yoke again' } }),
    );
    await s.releaseWorkClaim({ actingSessionId: 'w3', claimId: again.claim.claim_id, reason: 'done' });
    await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' }); // takes its reserved turn
    await s.endSession({ sessionId: 'w1' });
    expect(await rowOf('w1', 'recent_sessions')).toEqual(['🔒 QA_HOST:lab-1']);
  });

  test('B1 the board is one statement, and --project keeps sessions of the project or holding its claims', async () => {
    await p.takeProcess({ sessionId: 'w1', processKey: 'FEED' });
    await s.takeItem({ sessionId: 'a1', item: 'WEB-7' }); // an api session holding a web claim
    let statements = 0;
    const { Kysely, PostgresDialect } = await import('kysely');
    const { Pool } = await import('pg');
    const counted = new Kysely<any>({
      dialect: new PostgresDialect({ pool: new Pool({ connectionString: t.url, max: 1 }) }),
      log: () => void statements++,
    });
    try {
      await readBoard(counted, { recentLimit: 50, recentWindowHours: 24 });
      expect(statements).toBe(1);
    } finally {
      await counted.destroy();
    }
    const api = await boardOf('api');
    expect(api.active_sessions.map((r) => r.session_id)).toEqual(['a1']);
    const web = await boardOf('web');
    expect(web.active_sessions.map((r) => r.session_id).sort()).toEqual(['a1', 'op', 'w1', 'w2']);
  });
});

describe('U1 one schedule computation', () => {
  async function runWithDriver() {
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
    await s.registerSession({ sessionId: 'driver', actorId: 'dana', project: 'shop', machine: 'mac-1' });
    await s.registerSession({ sessionId: 'claimer', actorId: 'carl', project: 'shop', machine: 'mac-2' });
    const runs = deploymentRunActivities({ db: t.db, driverFreshMs: 60_000 });
    const run = await runs.createRun({
      sessionId: 'driver',
      project: 'shop',
      flow: 'release',
      target: 'stage',
      candidate: 'abc1234',
      idempotencyKey: 'u1',
      items: ['SHOP-1'],
    });
    await runs.executeRun({ sessionId: 'driver', runId: run.run_id });
    await s.takeItem({ sessionId: 'claimer', item: 'SHOP-1' });
    await s.takeItem({ sessionId: 'claimer', item: 'SHOP-2' });
    return run.run_id;
  }

  test('U1 explicit staffing follows the pinned workflow binding (the run driver), not the item claim', async () => {
    const runId = await runWithDriver();
    const views = boardActivities({ db: t.db, driverFreshMs: 60_000 });
    const board = await views.board({ project: 'shop' });
    expect(board.schedule.staffing.find((x) => x.item === 'SHOP-1')).toEqual({
      item: 'SHOP-1',
      project: 'shop',
      session_id: 'driver',
      basis: 'pinned_run_driver',
      run_id: runId,
    });
    expect(board.schedule.staffing.find((x) => x.item === 'SHOP-2')).toMatchObject({
      session_id: 'claimer',
      basis: 'item_claim',
    });
    // The board, fleet and frontier views answer from the same computation.
    expect(board.active_sessions.find((r) => r.session_id === 'driver')!.staffing).toEqual(['SHOP-1']);
    expect(board.active_sessions.find((r) => r.session_id === 'claimer')!.staffing).toEqual(['SHOP-2']);
    const fleet = await views.fleet({ project: 'shop' });
    expect(fleet.find((m) => m.machine_id === 'mac-1')!.sessions).toEqual([
      { session_id: 'driver', actor_id: 'dana', project: 'shop', staffing: ['SHOP-1'] },
    ]);
    expect(await views.frontier({ project: 'shop' })).toEqual([{ item: 'SHOP-3', project: 'shop' }]);
  });

  test('U1 a lapsed driver attachment falls back to the steering seat; no seat leaves the claim holder staffing', async () => {
    await runWithDriver();
    await t.db
      .updateTable('deployment_runs')
      .set({ driver_heartbeat_at: sql`now() - interval '1 hour'` })
      .execute();
    const views = boardActivities({ db: t.db, driverFreshMs: 60_000 });
    expect((await views.board({ project: 'shop' })).schedule.staffing[0]).toMatchObject({
      item: 'SHOP-1',
      session_id: 'claimer',
      basis: 'item_claim',
    });
    await s.takeSteeringSeat({ sessionId: 'op', project: 'shop' });
    expect((await views.board({ project: 'shop' })).schedule.staffing[0]).toMatchObject({
      item: 'SHOP-1',
      session_id: 'op',
      basis: 'steering_fallback',
    });
  });
});
