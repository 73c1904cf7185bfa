import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke, type CliResult } from '../helpers/cli';
import { releaseDefinition, writeDefinition } from '../helpers/runs';
import { testKeyDir } from '../helpers/sshKeys';

/**
 * Bad input is a usage error: exit 2, the message names the field, nothing is written. Each
 * case here reached `internal_error` (or was accepted) before.
 */
let t: TestDatabase;
const run = (args: string[], env: Record<string, string> = {}) => yoke(t.url, args, env);
const dir = mkdtempSync(join(tmpdir(), 'yoke-bad-'));

beforeAll(async () => {
  t = await createTestDatabase();
  await setUp(run, [
    [
      'apply',
      '-f',
      writeDefinition(
        releaseDefinition({ project: 'web', prefix: 'WEB', stageUrl: 'http://s.test', prodUrl: 'https://p.test' }),
      ),
    ],
    ['sessions', 'register', '--session', 's1', '--actor', 'a', '--harness', 'claude'],
  ]);
}, 60_000);
afterAll(async () => {
  await t.drop();
});

async function count(table: 'sessions' | 'projects' | 'test_machines' | 'environments'): Promise<number> {
  const row = await t.db
    .selectFrom(table)
    .select(({ fn }) => fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

function expectUsage(r: CliResult, field: string) {
  expect(r.code).toBe(2);
  const e = jsonError(r);
  expect(e.code).not.toBe('internal_error');
  expect(e.message).toContain(field);
}

test('session id over 200 characters is a usage error naming --session; nothing is registered', async () => {
  const before = await count('sessions');
  const r = await run(['sessions', 'register', '--session', 's'.repeat(201), '--actor', 'a', '--json']);
  expectUsage(r, '--session');
  expect(await count('sessions')).toBe(before);
});

test('issue 9 a session id over 200 characters given to any session command is a usage error naming --session, never session_not_registered', async () => {
  const long = 's'.repeat(201);
  for (const args of [
    ['sessions', 'heartbeat'],
    ['sessions', 'end'],
    ['hooks', 'usage', '--harness', 'claude', '--artifact', join(dir, 'none.jsonl')],
  ]) {
    const r = await run([...args, '--session', long, '--json']);
    expectUsage(r, '--session');
    expect(jsonError(r).message).toContain('at most 200 characters');
  }
});

test('issue 9 a session id with a control character is a usage error, nothing registered; a blank YOKE_SESSION_ID is no session given', async () => {
  const before = await count('sessions');
  for (const id of ['a\nb', 'a\tb']) {
    const r = await run(['sessions', 'register', '--session', id, '--actor', 'a', '--json']);
    expectUsage(r, '--session');
    expect(jsonError(r).message).toContain('control characters');
  }
  expect(await count('sessions')).toBe(before);
  const blank = await run(['sessions', 'heartbeat', '--json'], { YOKE_SESSION_ID: '  ' });
  expect(blank.code).toBe(2);
  expect(jsonError(blank).code).toBe('session_required');
});

test('issue 9 an empty option value is named in plain words, with a recovery that asks for a value', async () => {
  const r = await run(['deployment-runs', 'takeover', 'run-1', '--successor', '', '--json']);
  expectUsage(r, '--successor');
  expect(jsonError(r)).toMatchObject({
    message: '--successor: an empty value is not accepted',
    recovery: 'give --successor a value (see --help for the command)',
  });
});

test('a YAML alias bomb is refused as an invalid definition, not parsed to exhaustion', async () => {
  const lines = ['project: bomb', 'a: &a ["x","x","x","x","x","x","x","x","x","x"]'];
  for (let i = 1; i <= 9; i++) {
    const prev = String.fromCharCode(96 + i);
    const next = String.fromCharCode(97 + i);
    lines.push(`${next}: &${next} [${Array(10).fill(`*${prev}`).join(',')}]`);
  }
  const file = join(dir, 'bomb.yaml');
  writeFileSync(file, lines.join('\n'));
  const before = await count('projects');
  const r = await run(['apply', '-f', file, '--json']);
  expectUsage(r, file);
  expect(jsonError(r).code).toBe('invalid_project_definition');
  expect(await count('projects')).toBe(before);
});

test('a new project reusing an item_prefix is a usage error naming item_prefix; nothing is written', async () => {
  const file = writeDefinition({
    project: 'shop',
    item_prefix: 'WEB',
    environments: [{ name: 'stage', url: 'http://shop.test', tier: 'stage' }],
  });
  const before = await count('projects');
  const r = await run(['apply', '-f', file, '--json']);
  expectUsage(r, 'item_prefix');
  expect(jsonError(r).code).toBe('item_prefix_taken');
  expect(await count('projects')).toBe(before);
});

test('I9 projects create with a prefix another project uses is a usage error naming item_prefix; nothing is written', async () => {
  const before = await count('projects');
  const r = await run(['projects', 'create', 'shop2', '--prefix', 'WEB', '--json']);
  expectUsage(r, 'item_prefix');
  expect(jsonError(r)).toMatchObject({ code: 'item_prefix_taken', details: { field: 'item_prefix', prefix: 'WEB' } });
  expect(await count('projects')).toBe(before);
});

test('environment and deploy urls must be http(s): file:, javascript:, gopher: are named', async () => {
  const definition = releaseDefinition({
    project: 'evil',
    prefix: 'EVIL',
    stageUrl: 'file:///etc/passwd',
    prodUrl: 'gopher://p.test',
  });
  definition.environments.push({ name: 'js', url: 'javascript:alert(1)', tier: 'dev' } as never);
  const before = await count('environments');
  const r = await run(['apply', '-f', writeDefinition(definition), '--json']);
  expect(r.code).toBe(2);
  const problems = (jsonError(r).details.problems as { path: string }[]).map((p) => p.path);
  expect(problems).toEqual(
    expect.arrayContaining([
      'environments[0].url',
      'environments[1].url',
      'environments[4].url',
      'flows[0].stages[0].action.http.url',
    ]),
  );
  expect(await count('environments')).toBe(before);
});

test('apply refuses a definition over the size cap before parsing it (YOKE_APPLY_MAX_BYTES)', async () => {
  const file = join(dir, 'big.yaml');
  writeFileSync(file, `project: big\n# ${'x'.repeat(4000)}\n`);
  const r = await run(['apply', '-f', file, '--json'], { YOKE_APPLY_MAX_BYTES: '2048' });
  expectUsage(r, '--file');
  expect(jsonError(r)).toMatchObject({ code: 'project_definition_too_large', details: { max_bytes: 2048 } });
});

test('apply --dry-run reports unchanged obligations as unchanged, and a real change as an update', async () => {
  const definition = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: 'http://s.test',
    prodUrl: 'https://p.test',
  });
  const same = json(await run(['apply', '-f', writeDefinition(definition), '--dry-run', '--json']));
  expect(same.summary).toMatchObject({ create: 0, update: 0 });
  definition.items[0]!.obligations![0]!.target_env = 'production';
  const changed = json(await run(['apply', '-f', writeDefinition(definition), '--dry-run', '--json']));
  expect(changed.changes.filter((c: { action: string }) => c.action !== 'unchanged')).toEqual([
    { kind: 'obligation', name: 'WEB-1/checkout-e2e', action: 'update', fields: ['target_env'] },
  ]);
});

test('a directory as --artifact is a usage error naming --artifact', async () => {
  const r = await run(['hooks', 'usage', '--session', 's1', '--harness', 'claude', '--artifact', dir, '--json']);
  expectUsage(r, '--artifact');
});

test('test-machine add: an identity file that is not a key, or a --host starting with "-", is named; nothing is added', async () => {
  const notAKey = join(dir, 'id_not_a_key');
  writeFileSync(notAKey, 'hello\n');
  const base = ['test-machine', 'add', 'lab1', '--port', '22', '--user', 'u', '--credential', 'lab1', '--json'];
  const badKey = await run([...base, '--host', '127.0.0.1', '--identity-file', notAKey]);
  expectUsage(badKey, '--identity-file');
  const badHost = await run([...base, '--host=-oProxyCommand=touch /tmp/pwned', '--identity-file', notAKey]);
  expectUsage(badHost, '--host');
  // a user with spaces or a leading '-' is no login name (it would reach ssh's option parser elsewhere)
  for (const user of ['root -oProxyCommand=x', '-oProxyCommand=x', '  ']) {
    const badUser = await run([
      ...['test-machine', 'add', 'lab1', '--port', '22', '--credential', 'lab1', '--json'],
      ...['--host', '127.0.0.1', `--user=${user}`, '--identity-file', notAKey],
    ]);
    expectUsage(badUser, '--user');
  }
  expect(await count('test_machines')).toBe(0);
});

test("I13 test-machine add: a credential that is a path (traversal, absolute, another user's key) is a usage error naming --credential; neither --credential nor --identity-file names --credential; I3 an --identity-file alone that is no key names --identity-file; nothing is added or copied", async () => {
  const base = ['test-machine', 'add', 'lab2', '--host', '127.0.0.1', '--port', '22', '--user', 'u', '--json'];
  for (const credential of [
    '../../home/other/.ssh/id_ed25519',
    '/home/other/.ssh/id_ed25519',
    '.hidden',
    'a/b',
    'a\\b',
  ]) {
    const r = await run([...base, '--credential', credential]);
    expectUsage(r, '--credential');
  }
  const neither = await run(base);
  expectUsage(neither, '--credential');
  expect(jsonError(neither)).toMatchObject({ code: 'credential_required' });
  expect(jsonError(neither).recovery).toContain('YOKE_SSH_KEY_DIR');
  // I3: --identity-file alone is copied into the key directory, but only a readable private key
  const unreadable = await run([...base, '--identity-file', '/home/other/.ssh/id_ed25519']);
  expectUsage(unreadable, '--identity-file');
  expect(jsonError(unreadable)).toMatchObject({ code: 'identity_file_unreadable' });
  const notAKey = join(dir, 'id_text');
  writeFileSync(notAKey, 'hello\n');
  const text = await run([...base, '--identity-file', notAKey]);
  expectUsage(text, '--identity-file');
  expect(jsonError(text)).toMatchObject({ code: 'identity_file_not_a_key' });
  // W3: the .pub beside a key parses as a key, but every login with it would fail
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'id_lab')]);
  const pub = await run([...base, '--identity-file', join(dir, 'id_lab.pub')]);
  expectUsage(pub, '--identity-file');
  expect(jsonError(pub)).toMatchObject({ code: 'identity_file_not_a_key' });
  expect(jsonError(pub).message).toContain('public key');
  // C3: with a good key, a bad machine name is named as such (not as a credential it cannot be copied to)
  const badName = await run([
    ...['test-machine', 'add', 'lab 9', '--host', '127.0.0.1', '--port', '22', '--user', 'u'],
    ...['--identity-file', join(dir, 'id_lab'), '--json'],
  ]);
  expect(badName.code).toBe(2);
  expect(jsonError(badName)).toMatchObject({ code: 'invalid_test_machine_name' });
  expect(existsSync(join(testKeyDir, 'lab2'))).toBe(false);
  expect(await count('test_machines')).toBe(0);
});
