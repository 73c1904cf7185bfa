import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { projectActivities } from '../../activities/projects';
import { lockProjectDeclaration } from '../../db/projects';
import { YokeError } from '../../domain/errors';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { seedLab, services, type Services } from '../helpers/fixtures';
import { rolePools, sqlActors } from '../helpers/roles';
import { releaseDefinition, writeDefinition } from '../helpers/runs';

/**
 * Races found by racing the CLI, each replayed in one fixed interleaving: a second connection
 * (`other`) holds a lock or an uncommitted row at the point where the race bit, the operation
 * under test runs into it, and the test lets go only once the operations are where the race
 * needs them (blocked on a lock, or finished). No timing is hoped for.
 */

let t: TestDatabase;
let s: Services;
let other: Client;
let watcher: Client;

beforeEach(async () => {
  t = await createTestDatabase();
  s = services(t.db);
  await seedLab(s);
  other = new Client({ connectionString: t.url });
  watcher = new Client({ connectionString: t.url });
  await other.connect();
  await watcher.connect();
});
afterEach(async () => {
  await other.end();
  await watcher.end();
  await t.drop();
});

/** How a promise ended: its value, or the refusal code (anything else is rethrown by the caller's expect). */
type Outcome<T> = { ok: true; value: T } | { ok: false; code: string; error: unknown };

function outcome<T>(p: Promise<T>): Promise<Outcome<T>> {
  return p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, code: error instanceof YokeError ? error.code : String(error), error }),
  );
}

/** Backends of this database waiting for a lock, running a statement that contains `fragment`. */
async function blockedCount(fragment: string): Promise<number> {
  const { rows } = await watcher.query<{ n: string }>(
    `SELECT count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE $1`,
    [`%${fragment}%`],
  );
  return Number(rows[0]!.n);
}

/**
 * Waits until `p` has settled or a backend running `fragment` waits for a lock: the point where
 * the interleaving goes on, whichever of the two the code under test does.
 */
async function settledOrBlocked(p: Promise<unknown>, fragment: string): Promise<'settled' | 'blocked'> {
  let settled = false;
  void p.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let i = 0; i < 400; i++) {
    if (settled) return 'settled';
    if ((await blockedCount(fragment)) > 0) return 'blocked';
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`neither settled nor blocked on a lock: ${fragment}`);
}

/** Live claims of sessions that have ended or been terminated, sticky or not. */
async function liveClaimsOfEndedSessions(): Promise<{ claim_id: number; target_kind: string }[]> {
  const { rows } = await watcher.query<{ claim_id: number; target_kind: string }>(
    `SELECT c.claim_id, c.target_kind FROM work_claims c JOIN sessions x ON x.session_id = c.session_id
      WHERE c.released_at IS NULL AND (x.ended_at IS NOT NULL OR x.terminated_at IS NOT NULL)`,
  );
  return rows;
}

/** Live QA host holds on a machine that is not registered. */
async function liveClaimsOnRemovedMachines(): Promise<{ claim_id: number; machine: string }[]> {
  const { rows } = await watcher.query<{ claim_id: number; machine: string }>(
    `SELECT claim_id, scope->>'test_machine' AS machine FROM work_claims
      WHERE target_kind = 'qa_admission' AND released_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM test_machines m WHERE m.name = scope->>'test_machine')`,
  );
  return rows;
}

async function itemId(item: string): Promise<number> {
  const number = Number(item.split('-')[1]);
  const { rows } = await watcher.query<{ item_id: number }>(
    `SELECT i.item_id FROM backlog_items i JOIN projects p ON p.project_id = i.project_id
      WHERE p.item_prefix = 'WEB' AND i.number = $1`,
    [number],
  );
  return rows[0]!.item_id;
}

/** An uncommitted item claim of `session` on `item` in `other`: a take of the same item waits for it. */
async function holdItemUncommitted(session: string, item: string): Promise<void> {
  const id = await itemId(item);
  await other.query('BEGIN');
  await other.query(
    `INSERT INTO work_claims (target_kind, scope, key, project_id, item_id, session_id)
     SELECT 'item', jsonb_build_object('item_id', $1::integer), NULL, project_id, $1, $2 FROM backlog_items WHERE item_id = $1`,
    [id, session],
  );
}

/** Records an item (a take and its release), so a later take of it needs no item insert. */
async function recordItem(item: string): Promise<void> {
  const taken = await s.takeItem({ sessionId: 'w2', item });
  await s.releaseWorkClaim({ actingSessionId: 'w2', claimId: taken.claim.claim_id, reason: 'recorded' });
}

describe('defect 1: a take racing its session end', () => {
  test('C5 race: a take in flight when its session ends is released by that end or refused session_ended', async () => {
    await recordItem('WEB-2');
    // the take reads w1 live and waits at the insert behind another session's uncommitted claim
    await holdItemUncommitted('w2', 'WEB-2');
    const take = outcome(s.takeItem({ sessionId: 'w1', item: 'WEB-2' }));
    expect(await settledOrBlocked(take, 'WITH s AS')).toBe('blocked');
    // the end runs meanwhile: it must wait for the take (or it finds nothing to release)
    const end = outcome(s.endSession({ sessionId: 'w1' }));
    await settledOrBlocked(end, 'FOR UPDATE');
    await other.query('ROLLBACK');
    const [taken, ended] = await Promise.all([take, end]);
    expect(ended.ok).toBe(true);
    // the take either committed first, and the end released it, or met the end and was refused
    if (taken.ok) {
      expect(ended.ok && ended.value.released_claims.map((c) => c.claim_id)).toContain(taken.value.claim.claim_id);
    } else {
      expect(taken.code).toBe('session_ended');
    }
    expect(await liveClaimsOfEndedSessions()).toEqual([]);
  });

  test('C5 race: a take that reaches the session while its end is committing is refused session_ended (end locks first)', async () => {
    await recordItem('WEB-2');
    const held = await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    // the end locks w1, marks it ended, and waits to release WEB-1 (locked here)
    await other.query('BEGIN');
    await other.query('SELECT 1 FROM work_claims WHERE claim_id = $1 FOR UPDATE', [held.claim.claim_id]);
    const end = outcome(s.endSession({ sessionId: 'w1' }));
    expect(await settledOrBlocked(end, 'update "work_claims"')).toBe('blocked');
    // the take starts before the end commits: its statement sees w1 live
    const take = outcome(s.takeItem({ sessionId: 'w1', item: 'WEB-2' }));
    expect(await settledOrBlocked(take, 'WITH s AS')).toBe('blocked');
    await other.query('COMMIT');
    const [taken, ended] = await Promise.all([take, end]);
    expect(ended.ok).toBe(true);
    expect(taken).toMatchObject({ ok: false, code: 'session_ended' });
    expect(await liveClaimsOfEndedSessions()).toEqual([]);
  });

  test('C5 W9 race: a QA host take through the waiting line re-checks its session under the line lock', async () => {
    // w2 waits for lab-1, so the acquire goes the full path, which waits for the line (locked
    // here, as a release serving it would); w1 ends meanwhile
    await watcher.query(
      `INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, resume_command, rationale)
       VALUES ('lab-1', 'w2', 'bob', 'yoke claims coordination-claim acquire --key QA_HOST:lab-1', 'test')`,
    );
    await other.query('BEGIN');
    await other.query(`SELECT pg_advisory_xact_lock(hashtextextended('qa_line:lab-1', 0))`);
    const take = outcome(
      s.acquireCoordinationClaim({
        sessionId: 'w1',
        key: 'QA_HOST:lab-1',
        join: { resumeCommand: 'yoke claims coordination-claim acquire --key QA_HOST:lab-1' },
      }),
    );
    expect(await settledOrBlocked(take, 'pg_advisory_xact_lock')).toBe('blocked');
    await s.endSession({ sessionId: 'w1' });
    await other.query('COMMIT');
    // no hold and no wait for a session that has ended (W9: its end cancels its waits)
    expect(await take).toMatchObject({ ok: false, code: 'session_ended' });
    expect(await liveClaimsOfEndedSessions()).toEqual([]);
    const { rows } = await watcher.query(
      `SELECT wait_id FROM qa_test_machine_waits WHERE session_id = 'w1' AND state IN ('waiting', 'reserved')`,
    );
    expect(rows).toEqual([]);
  });
});

describe('a take racing the stale-session sweep', () => {
  test('C5 race: a take in flight when the sweep terminates its stale session is released by that sweep', async () => {
    await recordItem('WEB-2');
    await watcher.query(`UPDATE sessions SET heartbeat_at = now() - interval '2 hours' WHERE session_id = 'w1'`);
    // w1's take has inserted its claim and passed its guard (0062), and has not committed yet
    await holdItemUncommitted('w1', 'WEB-2');
    await other.query(`SELECT yoke_take_guard('w1', NULL)`);
    const sweep = outcome(s.sweepStaleSessions({ staleAfterMs: 3_600_000 }));
    // the sweep must wait for the take: terminating w1 under it, it would release nothing
    expect(await settledOrBlocked(sweep, 'for update')).toBe('blocked');
    await other.query('COMMIT');
    const swept = await sweep;
    expect(swept).toMatchObject({ ok: true, value: { terminated_sessions: ['w1'] } });
    const taken = await watcher.query<{ claim_id: number }>(
      `SELECT claim_id FROM work_claims WHERE session_id = 'w1' AND target_kind = 'item'`,
    );
    expect(swept.ok && swept.value.released_claim_ids).toEqual(taken.rows.map((r) => r.claim_id));
    expect(await liveClaimsOfEndedSessions()).toEqual([]);
  });

  test('C5 race: a take that starts while the sweep waits to terminate its session is released by that sweep', async () => {
    await recordItem('WEB-2');
    await watcher.query(`UPDATE sessions SET heartbeat_at = now() - interval '2 hours' WHERE session_id = 'w1'`);
    // the sweep's termination waits behind a lock on w1 held here, as another take's guard holds it
    await other.query('BEGIN');
    await other.query(`SELECT 1 FROM sessions WHERE session_id = 'w1' FOR KEY SHARE`);
    const sweep = outcome(s.sweepStaleSessions({ staleAfterMs: 3_600_000 }));
    expect(await settledOrBlocked(sweep, 'for update')).toBe('blocked');
    // a take meanwhile shares that lock (takes never wait for each other) and commits first
    const taken = await s.takeItem({ sessionId: 'w1', item: 'WEB-2' });
    await other.query('COMMIT');
    // the termination comes after it, so the release that follows finds its claim
    expect(await sweep).toMatchObject({
      ok: true,
      value: { terminated_sessions: ['w1'], released_claim_ids: [taken.claim.claim_id] },
    });
    expect(await liveClaimsOfEndedSessions()).toEqual([]);
  });
});

describe('defect 2: a QA host take racing the machine removal', () => {
  test('C3 race: a removal while a take is in flight never leaves a hold on no machine', async () => {
    // the take locks lab-1 and waits at the insert behind another session's uncommitted hold
    await other.query('BEGIN');
    await other.query(
      `INSERT INTO work_claims (target_kind, scope, key, session_id)
       VALUES ('qa_admission', '{"test_machine":"lab-1"}', 'QA_HOST:lab-1', 'w2')`,
    );
    const take = outcome(s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' }));
    expect(await settledOrBlocked(take, 'WITH s AS')).toBe('blocked');
    const removal = outcome(s.removeTestMachine({ name: 'lab-1' }));
    await settledOrBlocked(removal, 'FOR UPDATE');
    await other.query('ROLLBACK');
    const [taken, removed] = await Promise.all([take, removal]);
    // the take either committed first, and the removal was refused, or met the removal and was refused
    if (taken.ok) expect(removed).toMatchObject({ ok: false, code: 'test_machine_in_use' });
    else expect([taken.code, removed.ok]).toEqual(['test_machine_unknown', true]);
    expect(await liveClaimsOnRemovedMachines()).toEqual([]);
  });

  test('C3 race: a take while a removal is committing is refused test_machine_unknown', async () => {
    // the removal locks lab-2, deletes it, and waits to cancel its line's wait (locked here)
    await watcher.query(
      `INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, resume_command, rationale)
       VALUES ('lab-2', 'w2', 'bob', 'yoke claims coordination-claim acquire --key QA_HOST:lab-2', 'test')`,
    );
    await other.query('BEGIN');
    await other.query(`SELECT 1 FROM qa_test_machine_waits WHERE test_machine = 'lab-2' FOR UPDATE`);
    const removal = outcome(s.removeTestMachine({ name: 'lab-2' }));
    expect(await settledOrBlocked(removal, 'qa_test_machine_waits')).toBe('blocked');
    // a verification's take (ahead of the line, W8): its one statement sees lab-2 registered
    const take = outcome(s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2', bypassLine: true }));
    await settledOrBlocked(take, 'WITH s AS');
    await other.query('COMMIT');
    const [taken, removed] = await Promise.all([take, removal]);
    expect(removed.ok).toBe(true);
    expect(taken).toMatchObject({ ok: false, code: 'test_machine_unknown' });
    expect(await liveClaimsOnRemovedMachines()).toEqual([]);
  });

  test('C3 race: a take through the waiting line after the removal committed is refused test_machine_unknown', async () => {
    await watcher.query(
      `INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, resume_command, rationale)
       VALUES ('lab-2', 'w2', 'bob', 'yoke claims coordination-claim acquire --key QA_HOST:lab-2', 'test')`,
    );
    // a removal holding the line (as removeTestMachine does) lets go of it only when it commits
    await other.query('BEGIN');
    await other.query(`SELECT pg_advisory_xact_lock(hashtextextended('qa_line:lab-2', 0))`);
    const take = outcome(
      s.acquireCoordinationClaim({
        sessionId: 'w1',
        key: 'QA_HOST:lab-2',
        join: { resumeCommand: 'yoke claims coordination-claim acquire --key QA_HOST:lab-2' },
      }),
    );
    expect(await settledOrBlocked(take, 'pg_advisory_xact_lock')).toBe('blocked');
    await other.query(
      `UPDATE qa_test_machine_waits SET state = 'cancelled', settled_at = now() WHERE test_machine = 'lab-2'`,
    );
    await other.query(`DELETE FROM test_machines WHERE name = 'lab-2'`);
    await other.query('COMMIT');
    expect(await take).toMatchObject({ ok: false, code: 'test_machine_unknown' });
    expect(await liveClaimsOnRemovedMachines()).toEqual([]);
    const { rows } = await watcher.query(
      `SELECT wait_id FROM qa_test_machine_waits WHERE test_machine = 'lab-2' AND state IN ('waiting', 'reserved')`,
    );
    expect(rows).toEqual([]);
  });
});

describe('defect 3: concurrent adds of one test machine', () => {
  test('C3 race: an add that loses the insert to a concurrent add is refused test_machine_exists, not shown the winner', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'yoke-hostkey-'));
    const hostKeyFile = join(dir, 'host_key.pub');
    writeFileSync(hostKeyFile, 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMGNz6n5Ojq7Pir4G+MLU4/bQglP1oXmiiK8BiLq9Fz4\n');
    // the winner's insert, not yet committed: the loser's check sees no machine
    await other.query('BEGIN');
    await other.query(
      `INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint,
                                  host_key_source, verify_command, capture_command)
       VALUES ('lab-9', '10.0.0.1', 22, 'qa', 'none', 'ssh-ed25519 AAAA', 'SHA256:x', 'host_key_file', 'true', 'true')`,
    );
    const add = outcome(
      s.addTestMachine({ name: 'lab-9', host: '10.0.0.2', port: 22, user: 'qa', credential: 'none', hostKeyFile }),
    );
    expect(await settledOrBlocked(add, 'test_machines')).toBe('blocked');
    await other.query('COMMIT');
    expect(await add).toMatchObject({ ok: false, code: 'test_machine_exists' });
    const [machine] = await s.listTestMachines({ name: 'lab-9' });
    expect(machine!.host).toBe('10.0.0.1');
  });
});

describe('defect 4: concurrent applies of a new project', () => {
  const file = () =>
    writeDefinition(
      releaseDefinition({
        project: 'shop',
        prefix: 'SHOP',
        stageUrl: 'http://127.0.0.1:1',
        prodUrl: 'http://127.0.0.1:2',
      }),
    );

  test('apply idempotency race: an apply while another apply of the same new project commits reads its project, never a duplicate key', async () => {
    const definition = file();
    // the first apply, paused after it created the project (its transaction holds the declaration lock)
    let finishFirst!: () => void;
    const firstDone = new Promise<void>((r) => (finishFirst = r));
    let createdFirst!: () => void;
    const firstCreated = new Promise<void>((r) => (createdFirst = r));
    const first = t.db.transaction().execute(async (trx) => {
      await lockProjectDeclaration(trx, { name: 'shop', itemPrefix: 'SHOP' });
      await trx.insertInto('projects').values({ name: 'shop', item_prefix: 'SHOP' }).execute();
      createdFirst();
      await firstDone;
    });
    await firstCreated;
    const second = outcome(projectDefinitionActivities({ db: t.db }).applyProjectDefinition({ file: definition }));
    await settledOrBlocked(second, ''); // on the declaration lock, or (without it) on the project's insert
    finishFirst();
    await first;
    const applied = await second;
    expect(applied.ok ? applied.value.changes.find((c) => c.kind === 'project') : applied).toMatchObject({
      kind: 'project',
      action: expect.stringMatching(/^(unchanged|update)$/),
    });
  });

  test('apply idempotency race: a projects create while an apply of the same new project holds its declaration waits for it, so the apply never meets a duplicate name', async () => {
    // the apply, paused after its declaration lock and before it inserts the project
    let insertNow!: () => void;
    const mayInsert = new Promise<void>((r) => (insertNow = r));
    let locked!: () => void;
    const hasLock = new Promise<void>((r) => (locked = r));
    const apply = outcome(
      t.db.transaction().execute(async (trx) => {
        await lockProjectDeclaration(trx, { name: 'tool', itemPrefix: 'TOOL' });
        locked();
        await mayInsert;
        await trx.insertInto('projects').values({ name: 'tool', item_prefix: 'TOOL' }).execute();
      }),
    );
    await hasLock;
    const create = outcome(projectActivities({ db: t.db }).createProject({ name: 'tool', itemPrefix: 'TOOL' }));
    const createWas = await settledOrBlocked(create, 'pg_advisory_xact_lock');
    insertNow(); // whatever the create did, so the apply ends either way
    expect({ createWas, apply: await apply, create: await create }).toMatchObject({
      createWas: 'blocked',
      apply: { ok: true },
      create: { ok: true, value: { created: false } },
    });
  });

  test('apply idempotency race: eight concurrent applies of one new project file: one creates it, none fails', async () => {
    const definition = file();
    const pools = Array.from({ length: 8 }, () => t.connect(1));
    await Promise.all(pools.map((p) => p.selectFrom('projects').select('project_id').execute()));
    const results = await Promise.all(
      pools.map((db) => outcome(projectDefinitionActivities({ db }).applyProjectDefinition({ file: definition }))),
    );
    expect(results.filter((r) => !r.ok)).toEqual([]);
    const actions = results.map((r) => (r.ok ? r.value.changes.find((c) => c.kind === 'project')!.action : 'failed'));
    expect(actions.filter((a) => a === 'create')).toHaveLength(1);
  });
});

describe('the locks under a user role', () => {
  test("C3 C5: a user's own takes lock its session and the machine (no UPDATE right on test_machines) and pass, fast and through the line", async () => {
    const actors = sqlActors(() => t.url);
    const pools = rolePools();
    try {
      const user = await actors.add('taker');
      await watcher.query(
        `INSERT INTO sessions (session_id, actor_id, project_id) SELECT 'u1', $1, project_id FROM projects WHERE name = 'web'`,
        [user.name],
      );
      const mine = services(pools.dbOf(user));
      expect((await mine.takeItem({ sessionId: 'u1', item: 'WEB-7' })).claim).toMatchObject({ session_id: 'u1' });
      expect((await mine.acquireCoordinationClaim({ sessionId: 'u1', key: 'QA_HOST:lab-1' })).claim).toMatchObject({
        session_id: 'u1',
      });
      // through the line: w2 waits for lab-2, so the acquire goes the full path and joins
      await watcher.query(
        `INSERT INTO qa_test_machine_waits (test_machine, session_id, actor_id, resume_command, rationale)
         VALUES ('lab-2', 'w2', 'bob', 'yoke claims coordination-claim acquire --key QA_HOST:lab-2', 'test')`,
      );
      const resumeCommand = 'yoke claims coordination-claim acquire --key QA_HOST:lab-2';
      const joined = await outcome(
        mine.acquireCoordinationClaim({ sessionId: 'u1', key: 'QA_HOST:lab-2', join: { resumeCommand } }),
      );
      // the line served w2 first (W7): u1 is refused and waits behind it
      expect(joined).toMatchObject({ ok: false, code: 'claim_held' });
      expect((await mine.endSession({ sessionId: 'u1' })).ended).toBe(true);
      expect(await liveClaimsOfEndedSessions()).toEqual([
        expect.objectContaining({ target_kind: 'qa_admission' }), // C5: the QA host hold is sticky
      ]);
    } finally {
      await pools.destroy();
      await actors.end();
    }
  });
});
