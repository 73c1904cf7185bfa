import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { Client } from 'pg';
import { actorFactory, type TestActor } from '../helpers/actors';
import { json, jsonError, setUp, type CliResult } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf } from '../helpers/roles';
import { releaseRunArgs } from '../helpers/runs';
import { testKeyDir } from '../helpers/sshKeys';

/**
 * Issue 13, through the CLI: the authorization matrix (actor kind x operation x project x
 * seat x grant x hook context), each actor connected as its own Postgres role, and the
 * probe's attacks as regression tests. Every cell asserts allowed or the named refusal.
 */
let t: TestDatabase;
const actors = actorFactory(() => t.url);
let alice: TestActor; // user: runs.deploy on web, drives the run
let bob: TestActor; // agent: no grants
let carol: TestActor; // user: claims.release on web (an operator)
let boss: TestActor; // admin
const dir = mkdtempSync(join(tmpdir(), 'yoke-auth-'));
let runId: string;

/** A command as this actor with this session, Temporal out of reach (Postgres decides). */
const as = (who: TestActor, sid: string, args: string[]) =>
  who.run([...args, '--json'], { YOKE_SESSION_ID: sid, TEMPORAL_ADDRESS: '127.0.0.1:9' });

function outcome(r: CliResult): string {
  if (r.code === 0) return 'allowed';
  return jsonError(r).code;
}

/** The arguments of `test-machine add` pinned from a host key file, logging in as `key` says. */
const addMachineArgs = (name: string, key: string[]) => [
  'test-machine',
  'add',
  name,
  '--host',
  '127.0.0.1',
  '--port',
  '22',
  '--user',
  'qa',
  ...key,
  '--host-key-file',
  join(dir, 'other_user_key.pub'),
];

beforeAll(async () => {
  t = await createTestDatabase();
  [alice, bob, carol, boss] = [
    await actors.add('alice'),
    await actors.add('bob', 'agent'),
    await actors.add('carol'),
    await actors.add('boss', 'admin'),
  ];
  writeFileSync(
    join(dir, 'web.yaml'),
    [
      'project: web',
      'item_prefix: WEB',
      'environments:',
      '  - { name: stage, url: "http://127.0.0.1:9", tier: stage }',
      'flows:',
      '  - name: release',
      '    stages:',
      '      - { name: stage-qa, kind: qa, target: stage, scope: run, checks: [{ name: smoke }] }',
      '      - { name: signoff, kind: approval, target: stage }',
      'items:',
      '  - { id: WEB-1 }',
    ].join('\n'),
  );
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'other_user_key')]);
  await setUp(
    (args) => boss.run(args),
    [
      ['apply', '-f', join(dir, 'web.yaml')],
      ['projects', 'grant', 'web', '--actor', alice.name, '--permission', 'runs.deploy'],
      ['projects', 'grant', 'web', '--actor', carol.name, '--permission', 'claims.release'],
      // C3: a QA_HOST hold names a registered machine (an admin registers it).
      addMachineArgs('lab-9', ['--credential', 'lab-9']),
    ],
  );
  await setUp((args) => alice.run(args), [['sessions', 'register', '--session', 'a1', '--project', 'web']]);
  await setUp((args) => bob.run(args), [['sessions', 'register', '--session', 'b1', '--project', 'web']]);
  await setUp((args) => carol.run(args), [['sessions', 'register', '--session', 'c1', '--project', 'web']]);
  const created = await createRun(alice, 'a1', 'k1');
  if (created.code !== 0) throw new Error(created.stderr);
  runId = json<{ run_id: string }>(created).run_id;
  // The run as `execute` leaves it at its approval stage, driven by alice (the worker's part).
  await t.db
    .updateTable('deployment_runs')
    .set({ status: 'executing', driver_session_id: 'a1', driver_heartbeat_at: new Date(), current_stage: 'signoff' })
    .where('run_id', '=', runId)
    .execute();
  await t.db
    .insertInto('deployment_run_stages')
    .values([
      { run_id: runId, ordinal: 0, name: 'stage-qa', kind: 'qa', target_env: 'stage', status: 'passed' },
      { run_id: runId, ordinal: 1, name: 'signoff', kind: 'approval', target_env: 'stage', status: 'waiting' },
    ])
    .execute();
});
afterAll(async () => {
  await actors.removeAll();
  await t.drop();
});

/** `deployment-runs create` of the release flow to stage, as `who` acting from session `sid`. */
const createRun = (who: TestActor, sid: string, key: string) =>
  who.run([...releaseRunArgs('abc1234', key), '--json'], { YOKE_SESSION_ID: sid });

/** `test-machine add` as this actor, pinned from a host key file, logging in as `key` says. */
const addMachine = (who: TestActor, name: string, key: string[]) => who.run([...addMachineArgs(name, key), '--json']);

test('I13 probe: self-grant, projects, apply, test machines and back-dated pricing are refused for users, allowed for an admin', async () => {
  const pricing = join(dir, 'old.json');
  writeFileSync(
    pricing,
    JSON.stringify({ revision_id: 'r-old', effective_at: '2020-01-01T00:00:00Z', source: 'x', rates: {} }),
  );
  const cells: [string, (who: TestActor) => Promise<CliResult>][] = [
    [
      'self-grant',
      (who) => who.run(['projects', 'grant', 'web', '--actor', who.name, '--permission', 'claims.release', '--json']),
    ],
    ['projects create', (who) => who.run(['projects', 'create', `p-${who.name.slice(0, 5)}`, '--json'])],
    ['apply', (who) => who.run(['apply', '-f', join(dir, 'web.yaml'), '--json'])],
    ['test-machine add', (who) => addMachine(who, `lab-${who.name.slice(0, 5)}`, ['--credential', 'lab'])],
    ['back-dated pricing', (who) => who.run(['pricing', 'import', pricing, '--backdate', '--reason', 'fix', '--json'])],
  ];
  for (const [name, op] of cells) {
    for (const who of [alice, bob, carol])
      expect([name, who.name, outcome(await op(who))]).toEqual([name, who.name, 'permission_denied']);
    expect([name, outcome(await op(boss))]).toEqual([name, 'allowed']);
  }
  // U12: a user's import is refused as theirs to make first, never with a recovery (--backdate)
  // that would only be refused next
  const older = join(dir, 'older.json');
  writeFileSync(
    older,
    JSON.stringify({ revision_id: 'r-older', effective_at: '2020-01-01T00:00:00Z', source: 'x', rates: {} }),
  );
  expect(outcome(await alice.run(['pricing', 'import', older, '--json']))).toBe('permission_denied');
  const grants = await t.db
    .selectFrom('project_grants')
    .select('actor_id')
    .where('permission', '=', 'claims.release')
    .execute();
  expect(grants.map((g) => g.actor_id).sort()).toEqual([boss.name, carol.name].sort());
}, 180_000); // 20 CLI processes, each a node start on a loaded shared machine

test('I3 I13 test-machine add --identity-file without --credential copies the key for an admin only: a user or agent is refused before anything is written', async () => {
  const add = (who: TestActor, name: string) => addMachine(who, name, ['--identity-file', join(dir, 'other_user_key')]);
  for (const who of [alice, bob]) {
    expect(outcome(await add(who, `copy-${who.name.slice(0, 5)}`))).toBe('permission_denied');
    expect(existsSync(join(testKeyDir, `copy-${who.name.slice(0, 5)}`))).toBe(false);
  }
  const admin = await add(boss, 'copy-boss');
  expect(json(admin)).toMatchObject({ name: 'copy-boss', credential: 'copy-boss' });
  expect(existsSync(join(testKeyDir, 'copy-boss'))).toBe(true);
}, 120_000);

test('I13 probe: impersonating registration and ending another session are refused; your own are allowed', async () => {
  expect(outcome(await bob.run(['sessions', 'register', '--session', 'x1', '--actor', alice.name, '--json']))).toBe(
    'permission_denied',
  );
  expect(outcome(await bob.run(['sessions', 'end', '--session', 'a1', '--json']))).toBe('permission_denied');
  expect(outcome(await bob.run(['sessions', 'heartbeat', '--session', 'a1', '--json']))).toBe('permission_denied');
  expect(outcome(await bob.run(['sessions', 'heartbeat', '--session', 'b1', '--json']))).toBe('allowed');
  const a1 = await t.db
    .selectFrom('sessions')
    .select(['ended_at'])
    .where('session_id', '=', 'a1')
    .executeTakeFirstOrThrow();
  expect(a1.ended_at).toBeNull();
  const r = json(await boss.run(['sessions', 'register', '--session', 'for-bob', '--actor', bob.name, '--json']));
  expect(r).toMatchObject({ actor_id: bob.name, registered_by: boss.name });
});

test('I13 C8 C11 matrix: operator release by seat x grant x hook context; claims only with your own session; a refusal names every rule the caller misses', async () => {
  expect(
    outcome(await bob.run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-9', '--session', 'a1', '--json'])),
  ).toBe('permission_denied');
  const held = await alice.run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-9', '--json'], {
    YOKE_SESSION_ID: 'a1',
  });
  expect(outcome(held)).toBe('allowed');
  const claimId = String(json<{ claim_id: number }>(held).claim_id);
  const release = (who: TestActor, sid: string, env: Record<string, string> = {}) =>
    who.run(
      [
        'coordination-claim',
        'release',
        '--key',
        'QA_HOST:lab-9',
        '--claim-id',
        claimId,
        '--holder-session-id',
        'a1',
        '--reason',
        'stranded',
        '--session',
        sid,
        '--json',
      ],
      env,
    );
  const seat = (who: TestActor, sid: string, verb: 'take' | 'release') =>
    who.run(['claims', 'steering', verb, '--project', 'web', '--session', sid, '--json']);
  // No seat: refused whatever the grant.
  expect(outcome(await release(bob, 'b1'))).toBe('steering_seat_required');
  expect(outcome(await release(carol, 'c1'))).toBe('steering_seat_required');
  // C8 issue 13: told only to take the seat, bob took it and was then refused for the grant.
  const grantHint = `yoke projects grant web --actor ${bob.name} --permission claims.release`;
  const neither = jsonError(await release(bob, 'b1')).recovery;
  expect(neither).toContain(grantHint);
  expect(neither).toContain('yoke claims steering take --project web --session b1');
  expect(jsonError(await release(carol, 'c1')).recovery).not.toContain('projects grant');
  // A seat without the grant.
  expect(outcome(await seat(bob, 'b1', 'take'))).toBe('allowed');
  expect(outcome(await release(bob, 'b1'))).toBe('permission_denied');
  expect(jsonError(await release(bob, 'b1')).recovery).toContain(`an admin grants it: ${grantHint}`);
  // C8: with bob in the seat, carol is told who holds it, not to take a seat she cannot.
  const seatHeld = jsonError(await release(carol, 'c1'));
  expect(seatHeld.code).toBe('steering_seat_required');
  expect(seatHeld.recovery).toContain(`the seat is held by session b1 (actor ${bob.name})`);
  expect(outcome(await seat(bob, 'b1', 'release'))).toBe('allowed');
  // Seat and grant, from a hook context: refused; from a terminal: allowed, audited as carol.
  expect(outcome(await seat(carol, 'c1', 'take'))).toBe('allowed');
  expect(outcome(await release(carol, 'c1', { YOKE_HOOK_CONTEXT: '1' }))).toBe('hook_context_refused');
  expect(outcome(await release(carol, 'c1'))).toBe('allowed');
  const events = json<{ event_type: string }[]>(
    await boss.run(['events', 'list', '--type', 'WARNOperatorLeaseRelease', '--json']),
  );
  expect(events).toHaveLength(1);
  const row = await t.db
    .selectFrom('events')
    .select('actor_id')
    .where('event_type', '=', 'WARNOperatorLeaseRelease')
    .executeTakeFirstOrThrow();
  expect(row.actor_id).toBe(carol.name);
  const claim = await t.db
    .selectFrom('work_claims')
    .select('released_by_actor_id')
    .where('claim_id', '=', Number(claimId))
    .executeTakeFirstOrThrow();
  expect(claim.released_by_actor_id).toBe(carol.name);
  expect(outcome(await seat(carol, 'c1', 'release'))).toBe('allowed');
});

test("I13 R1 matrix: create needs runs.deploy; heartbeat, approve and any QA verdict (waived, failed, passed) on another actor's driven run are refused", async () => {
  expect(outcome(await createRun(bob, 'b1', 'kb'))).toBe('permission_denied');
  expect(outcome(await createRun(carol, 'c1', 'kc'))).toBe('permission_denied');
  for (const [who, sid] of [
    [bob, 'b1'],
    [carol, 'c1'],
  ] as const) {
    expect(outcome(await as(who, sid, ['deployment-runs', 'heartbeat', runId]))).toBe('run_driven_elsewhere');
    expect(outcome(await as(who, sid, ['deployment-runs', 'approve', runId, '--stage', 'signoff']))).toBe(
      'run_driven_elsewhere',
    );
    // R1 (issue 4/11): every run-level verdict, not only a waiver, is the driver's or a seat's
    for (const status of ['waived', 'failed', 'passed'])
      expect(
        outcome(await as(who, sid, ['deployment-runs', 'qa-verdict', runId, '--check', 'smoke', '--status', status])),
      ).toBe('run_driven_elsewhere');
  }
  // Naming alice's session does not make bob her: the actor is the connected role.
  expect(outcome(await as(bob, 'a1', ['deployment-runs', 'approve', runId, '--stage', 'signoff']))).toBe(
    'run_driven_elsewhere',
  );
  expect(outcome(await as(bob, 'a1', ['deployment-runs', 'heartbeat', runId]))).toBe('run_driven_elsewhere');
  expect(outcome(await as(alice, 'a1', ['deployment-runs', 'heartbeat', runId]))).toBe('allowed');
  expect(outcome(await as(alice, 'a1', ['deployment-runs', 'approve', runId, '--stage', 'signoff']))).toBe('allowed');
  const stage = await t.db
    .selectFrom('deployment_run_stages')
    .select('detail')
    .where('run_id', '=', runId)
    .where('name', '=', 'signoff')
    .executeTakeFirstOrThrow();
  expect(stage.detail).toContain(`approved by ${alice.name}`);
});

test("I13 R1 QA plan executions: verdicts and waivers on another actor's driven run are refused through the CLI and raw SQL; the runner's own verdict is written under its role", async () => {
  const plan = {
    id: 'manual',
    gate: { prompt: 'ready?' },
    cases: [
      { name: 'look', manual: { instructions: 'look at it' } },
      { name: 'suite', automatic: { test_machine: 'lab-9', command: 'true', pass_exit_status: 0 } },
    ],
  };
  // Begun by alice (the run's driver) at the run's QA stage, as `qa begin` leaves it.
  const { rows } = await sql<{ execution_id: number }>`
    INSERT INTO qa_plan_executions (run_id, stage_name, plan_id, plan, session_id, target_environment, served_revision_path,
      delivered_commit, revision_check)
    VALUES (${runId}, 'stage-qa', 'manual', ${JSON.stringify(plan)}::jsonb, 'a1', 'stage', '/revision', 'abc1234', 'unverified')
    RETURNING execution_id`.execute(t.db);
  const id = String(rows[0]!.execution_id);
  for (const [who, sid] of [
    [bob, 'b1'],
    [carol, 'c1'],
  ] as const) {
    expect(outcome(await as(who, sid, ['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed']))).toBe(
      'run_driven_elsewhere',
    );
    expect(outcome(await as(who, sid, ['qa', 'waive', id, '--case', 'look', '--reason', 'mine now']))).toBe(
      'run_driven_elsewhere',
    );
  }
  // Raw SQL as each role meets the same rule, and cannot borrow the runner's session or pass an automatic case.
  const insert = async (who: TestActor, sid: string, kase: string, kind: string, verdict: string) => {
    const c = new Client({ connectionString: who.url });
    await c.connect();
    try {
      return await refusalOf(
        c.query(
          `INSERT INTO qa_plan_execution_results (execution_id, case_name, ordinal, kind, verdict, revision_check, recorded_by_session_id)
           VALUES ($1, $2, 0, $3, $4, 'unverified', $5)`,
          [Number(id), kase, kind, verdict, sid],
        ),
      );
    } finally {
      await c.end();
    }
  };
  expect(await insert(bob, 'b1', 'gate', 'gate', 'passed')).toBe('run_driven_elsewhere');
  expect(await insert(bob, 'b1', 'look', 'manual', 'waived')).toBe('run_driven_elsewhere');
  expect(await insert(bob, 'a1', 'gate', 'gate', 'passed')).toBe('permission_denied');
  expect(await insert(alice, 'a1', 'suite', 'manual', 'passed')).toBe('permission_denied');
  const recorded = () =>
    t.db.selectFrom('qa_plan_execution_results').select('case_name').where('execution_id', '=', Number(id)).execute();
  expect(await recorded()).toEqual([]);
  // The runner (and driver) records through the CLI, under her own role.
  expect(outcome(await as(alice, 'a1', ['qa', 'verdict', id, '--case', 'gate', '--verdict', 'passed']))).toBe(
    'allowed',
  );
  expect(outcome(await as(alice, 'a1', ['qa', 'waive', id, '--case', 'look', '--reason', 'checked by phone']))).toBe(
    'allowed',
  );
  expect((await recorded()).map((r) => r.case_name).sort()).toEqual(['gate', 'look']);
});

test("issue 4 issue 13 R1: the CLI honours the deployment's driver freshness from Postgres, not its own environment; a lapse by that setting frees the run for the CLI and Postgres alike", async () => {
  await setUp(
    (args) => boss.run(args),
    [['projects', 'grant', 'web', '--actor', bob.name, '--permission', 'runs.deploy']],
  );
  const heartbeatAgo = (seconds: number) =>
    t.db
      .updateTable('deployment_runs')
      .set({ driver_session_id: 'a1', driver_heartbeat_at: sql`now() - make_interval(secs => ${seconds})` })
      .where('run_id', '=', runId)
      .execute();
  const bobBeats = (env: Record<string, string> = {}) =>
    bob.run(['deployment-runs', 'heartbeat', runId, '--json'], {
      YOKE_SESSION_ID: 'b1',
      TEMPORAL_ADDRESS: '127.0.0.1:9',
      ...env,
    });
  // A caller's own environment cannot shorten the deployment's setting (ten minutes here).
  await heartbeatAgo(7);
  const refused = await bobBeats({ YOKE_DRIVER_FRESH_SECONDS: '5' });
  expect(jsonError(refused)).toMatchObject({
    code: 'run_driven_elsewhere',
    details: { run_id: runId, driver_session_id: 'a1' },
  });
  // The deployment's setting is 5 s: 7 s after alice's heartbeat the run is free, for the CLI and for Postgres.
  await sql`UPDATE deployment_settings SET driver_fresh_seconds = 5`.execute(t.db);
  try {
    await heartbeatAgo(2);
    expect(outcome(await bobBeats())).toBe('run_driven_elsewhere');
    await heartbeatAgo(7);
    expect(outcome(await bobBeats())).toBe('allowed');
    const run = await t.db
      .selectFrom('deployment_runs')
      .select('driver_session_id')
      .where('run_id', '=', runId)
      .executeTakeFirstOrThrow();
    expect(run.driver_session_id).toBe('b1');
  } finally {
    await sql`UPDATE deployment_settings SET driver_fresh_seconds = 600`.execute(t.db);
  }
}, 120_000);

test('issue 4 R1: a CLI run with YOKE_DRIVER_FRESH_SECONDS set decides by its own setting, as the README says; without it, by the recorded one', async () => {
  await setUp((args) => boss.run(args), [['sessions', 'register', '--session', 'x1', '--project', 'web']]);
  await t.db
    .updateTable('deployment_runs')
    .set({ driver_session_id: 'a1', driver_heartbeat_at: sql`now() - make_interval(secs => 7)` })
    .where('run_id', '=', runId)
    .execute();
  const bossBeats = (env: Record<string, string> = {}) =>
    boss.run(['deployment-runs', 'heartbeat', runId, '--json'], {
      YOKE_SESSION_ID: 'x1',
      TEMPORAL_ADDRESS: '127.0.0.1:9',
      ...env,
    });
  // the recorded setting (ten minutes): alice's attachment is still live
  expect(outcome(await bossBeats())).toBe('run_driven_elsewhere');
  // the admin's own 5 s: 7 s after alice's heartbeat the run is free
  expect(outcome(await bossBeats({ YOKE_DRIVER_FRESH_SECONDS: '5' }))).toBe('allowed');
}, 60_000);

test("C1 I13 W7 joining a machine's waiting line with another actor's session is refused in the claim's own words, never a row-security message, and no wait is written", async () => {
  expect((await boss.run(addMachineArgs('lab-8', ['--credential', 'lab-8']))).code).toBe(0);
  const held = await alice.run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-8', '--json'], {
    YOKE_SESSION_ID: 'a1',
  });
  expect(outcome(held)).toBe('allowed');
  try {
    const r = await carol.run([
      'coordination-claim',
      'acquire',
      '--key',
      'QA_HOST:lab-8',
      '--session',
      'a1',
      '--wait',
      '--wait-timeout',
      '2',
      '--json',
    ]);
    expect(r.code).toBe(1);
    expect(jsonError(r)).toMatchObject({
      code: 'permission_denied',
      message: `${carol.name} cannot take a claim for session a1 of actor ${alice.name}: claims are taken with your own session`,
    });
    const waits = await t.db
      .selectFrom('qa_test_machine_waits')
      .select('wait_id')
      .where('test_machine', '=', 'lab-8')
      .execute();
    expect(waits).toEqual([]);
  } finally {
    const claimId = String(json<{ claim_id: number }>(held).claim_id);
    await alice.run(['claims', 'work', 'release', '--claim-id', claimId, '--reason', 'test over', '--session', 'a1']);
  }
});

test('C4 issue 13: another actor naming the owning item of a migration hold is refused claim_held naming the holder, not a permission error about releasing', async () => {
  const key = [
    'coordination-claim',
    'acquire',
    '--key',
    'LIVE_DB_MIGRATION:users',
    '--project',
    'web',
    '--item',
    'WEB-1',
  ];
  expect(outcome(await as(alice, 'a1', key))).toBe('allowed');
  // the owning item re-enters from its own actor's session
  expect(outcome(await as(alice, 'a1', key))).toBe('allowed');
  const refused = await as(bob, 'b1', key);
  expect(refused.code).toBe(1);
  expect(jsonError(refused)).toMatchObject({
    code: 'claim_held',
    details: { holder: { session_id: 'a1', item: 'WEB-1' } },
  });
  expect(
    outcome(
      await as(alice, 'a1', [
        'claims',
        'work',
        'release',
        '--claim-id',
        String((jsonError(refused).details.holder as { claim_id: number }).claim_id),
        '--reason',
        'done',
      ]),
    ),
  ).toBe('allowed');
});
