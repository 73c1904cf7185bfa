import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke } from '../helpers/cli';
import { addTestMachines, services } from '../helpers/fixtures';

let t: TestDatabase;
const run = (args: string[], env: Record<string, string> = {}) => yoke(t.url, args, env);
/** C9: w2, the holder, releases its claim by id. */
const releaseByHolder = (claimId: number, reason: string, ...flags: string[]) =>
  run(['claims', 'work', 'release', '--claim-id', String(claimId), '--reason', reason, '--session', 'w2', ...flags]);

beforeAll(async () => {
  t = await createTestDatabase();
  await setUp(run, [
    ['projects', 'create', 'web', '--prefix', 'WEB'],
    ['projects', 'grant', 'web', '--actor', 'ops', '--permission', 'claims.release'],
    ['sessions', 'register', '--session', 'op', '--actor', 'ops', '--project', 'web'],
    [
      'sessions',
      'register',
      '--session',
      'w1',
      '--actor',
      'alice',
      '--project',
      'web',
      '--machine',
      'm1',
      '--harness',
      'claude',
    ],
    ['sessions', 'register', '--session', 'w2', '--actor', 'bob', '--project', 'web'],
    ['claims', 'steering', 'take', '--project', 'web', '--session', 'op'],
  ]);
  await addTestMachines(services(t.db), ['cli-lab', 'busy', 'listed', 'done', 'sticky', 'idle', 'gone']);
});
afterAll(async () => {
  await t.drop();
});

test('C6 acquire by operator key prints the claim row with the documented JSON fields', async () => {
  const r = await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:cli-lab', '--json'], {
    YOKE_SESSION_ID: 'w1',
  });
  expect(r.code).toBe(0);
  const row = json(r);
  for (const field of [
    'claim_id',
    'key',
    'target_kind',
    'scope',
    'project_id',
    'item_id',
    'session_id',
    'claimed_at',
    'heartbeat_at',
    'released_at',
    'release_reason',
  ]) {
    expect(row).toHaveProperty(field);
  }
  expect(row).toMatchObject({
    key: 'QA_HOST:cli-lab',
    target_kind: 'qa_admission',
    scope: { test_machine: 'cli-lab' },
    session_id: 'w1',
    released_at: null,
  });
});

test('C3 a refused acquire exits 1 with code, message naming the holder, and recovery on stderr', async () => {
  const held = json(
    await run(['claims', 'coordination-claim', 'acquire', '--key', 'QA_HOST:busy', '--session', 'w1', '--json']),
  );
  const human = await run(['claims', 'coordination-claim', 'acquire', '--key', 'QA_HOST:busy', '--session', 'w2']);
  expect(human.code).toBe(1);
  expect(human.stderr).toMatch(new RegExp(`^claim_held: QA_HOST:busy is held by claim ${held.claim_id} \\(session w1`));
  expect(human.stderr).toMatch(/\nrecovery: /);
  const machine = await run([
    'claims',
    'coordination-claim',
    'acquire',
    '--key',
    'QA_HOST:busy',
    '--session',
    'w2',
    '--json',
  ]);
  expect(machine.code).toBe(1);
  expect(jsonError(machine)).toMatchObject({
    code: 'claim_held',
    details: { holder: { claim_id: held.claim_id, session_id: 'w1' } },
  });
  expect(machine.stdout).toBe('');
});

test('W4 --wait is for QA_HOST keys: on a key with no waiting line it is a usage error naming --wait (it was ignored)', async () => {
  for (const key of ['LIVE_DB_MIGRATION:orders', 'ROUTE_QUALIFICATION:tok-1']) {
    const r = await run([
      'coordination-claim',
      'acquire',
      '--key',
      key,
      '--project',
      'web',
      '--wait',
      '--session',
      'd1',
      '--json',
    ]);
    expect(r.code).toBe(2);
    expect(jsonError(r)).toMatchObject({ code: 'invalid_argument', details: { option: '--wait', key } });
    expect(jsonError(r).recovery).toContain('drop --wait');
  }
  // a retired DEPLOY: key is still refused for what it is
  const retired = await run([
    'coordination-claim',
    'acquire',
    '--key',
    'DEPLOY:web',
    '--wait',
    '--session',
    'd1',
    '--json',
  ]);
  expect(retired.code).toBe(1);
  expect(jsonError(retired).code).toBe('deploy_lock_retired');
});

test('C7 list --key QA_HOST:<machine> --active-only --json ignores --project', async () => {
  await run(['projects', 'create', 'api', '--json']);
  const held = json(
    await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:listed', '--session', 'w1', '--json']),
  );
  const r = await run([
    'coordination-claim',
    'list',
    '--key',
    'QA_HOST:listed',
    '--active-only',
    '--project',
    'api',
    '--json',
  ]);
  expect(r.code).toBe(0);
  expect(json<{ claim_id: number }[]>(r).map((c) => c.claim_id)).toEqual([held.claim_id]);
});

test('C3 C7 list --key QA_HOST:<machine> refuses a machine nobody added, and answers (none) for an idle one', async () => {
  const unknown = await run(['coordination-claim', 'list', '--key', 'QA_HOST:nosuch', '--json']);
  expect(unknown.code).toBe(1);
  expect(jsonError(unknown)).toMatchObject({ code: 'test_machine_unknown', details: { test_machine: 'nosuch' } });
  expect(jsonError(unknown).message).toContain('nosuch');
  expect(jsonError(unknown).recovery).toContain('yoke test-machine list');
  const text = await run(['coordination-claim', 'list', '--key', 'QA_HOST:NoSuch', '--active-only']);
  expect(text.code).toBe(1);
  expect(text.stderr).toMatch(/^test_machine_unknown: no test machine is named nosuch/);

  // A registered machine nobody holds is simply free.
  const idle = await run(['coordination-claim', 'list', '--key', 'QA_HOST:idle', '--active-only']);
  expect({ code: idle.code, stdout: idle.stdout.trim() }).toEqual({ code: 0, stdout: '(none)' });

  // A removed machine keeps its history, and listing it is not refused.
  const held = json(await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:gone', '--session', 'w2', '--json']));
  expect((await releaseByHolder(held.claim_id, 'done')).code).toBe(0);
  expect((await run(['test-machine', 'remove', 'gone'])).code).toBe(0);
  const history = await run(['coordination-claim', 'list', '--key', 'QA_HOST:gone', '--json']);
  expect(history.code).toBe(0);
  expect(json<{ claim_id: number }[]>(history).map((c) => c.claim_id)).toEqual([held.claim_id]);
  expect(json(await run(['coordination-claim', 'list', '--key', 'QA_HOST:gone', '--active-only', '--json']))).toEqual(
    [],
  );
});

test('C8 C11 the operator release from a steering seat warns, records the reason, and refuses in a hook context', async () => {
  const held = json(
    await run([
      'coordination-claim',
      'acquire',
      '--key',
      'LIVE_DB_MIGRATION:orders',
      '--project',
      'web',
      '--item',
      'WEB-4',
      '--session',
      'w1',
      '--json',
    ]),
  );
  const args = [
    'coordination-claim',
    'release',
    '--project',
    'web',
    '--key',
    'LIVE_DB_MIGRATION:orders',
    '--claim-id',
    String(held.claim_id),
    '--holder-session-id',
    'w1',
    '--reason',
    'author gone',
    '--session',
    'op',
  ];

  const hook = await run([...args, '--json'], { YOKE_HOOK_CONTEXT: '1' });
  expect(hook.code).toBe(1);
  expect(jsonError(hook).code).toBe('hook_context_refused');

  const noProject = await run(args.filter((a, i) => a !== '--project' && args[i - 1] !== '--project'));
  expect(noProject.code).toBe(2);
  expect(noProject.stderr).toMatch(/^project_required: /);

  const done = await run(args);
  expect(done.code).toBe(0);
  expect(done.stderr).toContain('WARNOperatorLeaseRelease');
  const events = json(
    await run(['events', 'list', '--type', 'WARNOperatorLeaseRelease', '--claim-id', String(held.claim_id), '--json']),
  );
  expect(events).toHaveLength(1);
  const [row] = json(
    await run(['coordination-claim', 'list', '--key', 'LIVE_DB_MIGRATION:orders', '--project', 'web', '--json']),
  );
  expect(row).toMatchObject({ claim_id: held.claim_id, release_reason: 'author gone', item: 'WEB-4' });
});

test("C9 claims work release --claim-id N --reason TEXT releases the holder's QA host", async () => {
  const held = json(await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:done', '--session', 'w2', '--json']));
  const r = await releaseByHolder(held.claim_id, 'run complete', '--json');
  expect(r.code).toBe(0);
  expect(json(r)).toMatchObject({ claim_id: held.claim_id, release_reason: 'run complete' });
});

test('C12 a DEPLOY: key is refused with deploy_lock_retired', async () => {
  const r = await run(['coordination-claim', 'acquire', '--key', 'DEPLOY:web', '--session', 'w1', '--json']);
  expect(r.code).toBe(1);
  expect(jsonError(r).code).toBe('deploy_lock_retired');
});

test('C5 sessions end releases the steering seat and item but keeps the QA host (sticky)', async () => {
  await run(['sessions', 'register', '--session', 'w3', '--actor', 'erin', '--project', 'web']);
  await run(['claims', 'item', 'take', 'WEB-9', '--session', 'w3']);
  const qa = json(await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:sticky', '--session', 'w3', '--json']));
  const r = json(await run(['sessions', 'end', '--session', 'w3', '--json']));
  expect(r.ended).toBe(true);
  expect(r.released_claims.map((c: { item: string }) => c.item)).toEqual(['WEB-9']);
  expect(r.retained_sticky_claims.map((c: { claim_id: number }) => c.claim_id)).toEqual([qa.claim_id]);
});

test('steering seat: one live seat per project, item claim: one live holder per item', async () => {
  const seat = await run(['claims', 'steering', 'take', '--project', 'web', '--session', 'w1', '--json']);
  expect(seat.code).toBe(1);
  expect(jsonError(seat)).toMatchObject({ code: 'claim_held', details: { holder: { session_id: 'op' } } });
  expect((await run(['claims', 'item', 'take', 'WEB-20', '--session', 'w1'])).code).toBe(0);
  const second = await run(['claims', 'item', 'take', 'WEB-20', '--session', 'w2', '--json']);
  expect(jsonError(second).code).toBe('claim_held');
  expect((await run(['claims', 'item', 'release', 'WEB-20', '--session', 'w1'])).code).toBe(0);
  expect((await run(['claims', 'item', 'take', 'WEB-20', '--session', 'w2'])).code).toBe(0);
});

test('usage and validation errors exit 2 naming the problem', async () => {
  const missing = await run(['coordination-claim', 'acquire', '--session', 'w1']);
  expect(missing.code).toBe(2);
  expect(missing.stderr).toMatch(/^usage: required option '--key <key>' not specified/);
  const badId = await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    'abc',
    '--reason',
    'x',
    '--session',
    'w1',
    '--json',
  ]);
  expect(badId.code).toBe(2);
  expect(jsonError(badId)).toMatchObject({ code: 'invalid_argument', details: { option: '--claim-id' } });
  // claim ids are decimal digits only: 0x10 and 1e3 are not claims 16 and 1000
  for (const id of ['0x10', '1e3']) {
    const notDecimal = await run([
      'claims',
      'work',
      'release',
      '--claim-id',
      id,
      '--reason',
      'x',
      '--session',
      'w1',
      '--json',
    ]);
    expect(notDecimal.code).toBe(2);
    expect(jsonError(notDecimal)).toMatchObject({ code: 'invalid_argument', details: { option: '--claim-id' } });
  }
  const noSession = await run(['claims', 'item', 'take', 'WEB-1']);
  expect(noSession.code).toBe(2);
  expect(noSession.stderr).toMatch(/^session_required: .*\nrecovery: pass --session S or set YOKE_SESSION_ID/);
  const badKey = await run(['coordination-claim', 'acquire', '--key', 'PRINTER:x', '--session', 'w1']);
  expect(badKey.code).toBe(2);
  expect(badKey.stderr).toMatch(/^invalid_operator_key: /);
});

test('an unreachable Postgres exits 3 with the recovery', async () => {
  const r = await yoke('postgres://postgres@127.0.0.1:1/nowhere', ['coordination-claim', 'list', '--json']);
  expect(r.code).toBe(3);
  expect(jsonError(r)).toMatchObject({ code: 'postgres_unreachable' });
  expect(jsonError(r).recovery).toContain('npm start');
});

test("C9 a release by another actor's session of a claim with no project says whose live session may release it, and once the holder's session has ended it does not send you to that session", async () => {
  await setUp(run, [
    ['sessions', 'register', '--session', 'np-h', '--actor', 'dora'],
    ['sessions', 'register', '--session', 'np-o', '--actor', 'eve'],
  ]);
  await addTestMachines(services(t.db), ['np-lab']);
  const held = await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:np-lab', '--session', 'np-h', '--json']);
  const claimId = String(json<{ claim_id: number }>(held).claim_id);
  const release = () =>
    run(['claims', 'work', 'release', '--claim-id', claimId, '--reason', 'r', '--session', 'np-o', '--json']);
  const live = jsonError(await release());
  expect(live).toMatchObject({ code: 'not_claim_holder' });
  expect(live.recovery).toBe('act as the holder (--session np-h), or from another live session of actor dora');
  // QA_HOST holds are sticky (C5): the claim outlives its session's end
  expect((await run(['sessions', 'end', '--session', 'np-h'])).code).toBe(0);
  const ended = jsonError(await release());
  expect(ended.recovery).toBe(
    `session np-h has ended: release it from a live session of actor dora: yoke claims work release --claim-id ${claimId} --reason R --session S`,
  );
});

test('C2 C4 --item names the owner of a migration hold only: on QA_HOST or ROUTE_QUALIFICATION it is a usage error naming --item, nothing taken; a path claim is for an item or a process, not both', async () => {
  const claimsBefore = await t.db
    .selectFrom('work_claims')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  for (const key of ['QA_HOST:idle', 'ROUTE_QUALIFICATION:checkout']) {
    const r = await run(
      ['coordination-claim', 'acquire', '--key', key, '--project', 'web', '--item', 'WEB-1', '--json'],
      {
        YOKE_SESSION_ID: 'w1',
      },
    );
    expect(r.code).toBe(2);
    expect(jsonError(r)).toMatchObject({ code: 'invalid_argument', details: { option: '--item', key } });
    expect(jsonError(r).recovery).toBe(`drop --item: yoke coordination-claim acquire --key ${key} --project web`);
  }
  const both = await run(['claims', 'path', 'take', 'src/x.ts', '--item', 'WEB-1', '--process', 'FEED', '--json'], {
    YOKE_SESSION_ID: 'w1',
  });
  expect(both.code).toBe(2);
  expect(jsonError(both)).toMatchObject({ code: 'invalid_argument', details: { option: '--process' } });
  const claimsAfter = await t.db
    .selectFrom('work_claims')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  expect(claimsAfter.n).toBe(claimsBefore.n);
});
