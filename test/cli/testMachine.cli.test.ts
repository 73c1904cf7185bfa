import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke, yokeBin, type CliResult, setUp } from '../helpers/cli';
import { startSshHost, type SshHost } from '../helpers/sshd';
import { testKeyDir } from '../helpers/sshKeys';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { untilTrue as until } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;
let host: SshHost;
let env: Record<string, string>;
const run = (args: string[], extra: Record<string, string> = {}) => yoke(t.url, args, { ...env, ...extra });

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  host = await startSshHost('cli');
  writeFileSync(join(host.dir, 'healthy'), '');
  env = { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: w.taskQueue };
  await setUp(run, [
    ['projects', 'create', 'web'],
    ['projects', 'grant', 'web', '--actor', 'ops', '--permission', 'claims.release'],
    ['sessions', 'register', '--session', 'op', '--actor', 'ops', '--project', 'web'],
    ['sessions', 'register', '--session', 'w1', '--actor', 'alice', '--project', 'web'],
    ['sessions', 'register', '--session', 'q1', '--actor', 'bob', '--project', 'web'],
    ['sessions', 'register', '--session', 'q2', '--actor', 'carol', '--project', 'web'],
  ]);
}, 60_000);

afterAll(async () => {
  await host.stop();
  await w.shutdown();
  await t.drop();
});

const addArgs = (name: string, extra: string[] = [], key = ['--credential', host.credential]) => [
  'test-machine',
  'add',
  name,
  '--host',
  host.host,
  '--port',
  String(host.port),
  '--user',
  host.user,
  ...key,
  '--verify-command',
  `test -f ${join(host.dir, 'healthy')}`,
  ...extra,
  '--json',
];

test('test-machine add pins the host key (file or first use); list --json shows health, holder and line', async () => {
  const pinned = await run(addArgs('lab', ['--host-key-file', host.hostKeyFile]));
  expect(pinned.code).toBe(0);
  expect(json(pinned)).toMatchObject({
    name: 'lab',
    host_key_source: 'host_key_file',
    healthy: true,
    holder: null,
    waiting: 0,
  });
  const tofu = await run(addArgs('lab-tofu'));
  expect(json(tofu)).toMatchObject({
    name: 'lab-tofu',
    host_key_source: 'trust_on_first_use',
    host_key_fingerprint: json(pinned).host_key_fingerprint,
  });
  const again = await run(addArgs('lab', ['--host-key-file', host.hostKeyFile]));
  expect(again.code).toBe(1);
  expect(jsonError(again).code).toBe('test_machine_exists');
  const badKey = await run(addArgs('lab-bad', ['--host-key-file', host.identityFile]));
  expect(badKey.code).toBe(2);
  expect(jsonError(badKey).code).toBe('invalid_host_key_file');
  const list = json<{ name: string }[]>(await run(['test-machine', 'list', '--json']));
  expect(list.map((m) => m.name)).toEqual(['lab', 'lab-tofu']);
});

test('W4 W5 a refused acquire joins the line with its own command as resume_command and prints the position', async () => {
  const held = await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab', '--session', 'w1', '--json']);
  expect(held.code).toBe(0);
  const args = ['claims', 'coordination-claim', 'acquire', '--key', 'QA_HOST:lab', '--session', 'q1'];
  const refused = await run(args);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toMatch(
    /^claim_held: QA_HOST:lab is held by claim \d+ \(session w1.*joined the waiting line at position 1/,
  );
  expect(refused.stderr).toContain('recovery: you are number 1 in line');
  const [wait] = json<Record<string, unknown>[]>(await run(['test-machine', 'waits', 'lab', '--json']));
  expect(wait).toMatchObject({
    position: 1,
    session: 'q1',
    session_id: 'q1',
    state: 'waiting',
    resume_command: `yoke ${args.join(' ')}`,
  });
  expect(wait!.rationale).toContain('claim_held');
  // joining again keeps the first queued_at
  await run([...args, '--json']);
  const [still] = json<Record<string, unknown>[]>(await run(['test-machine', 'waits', 'lab', '--json']));
  expect(still!.queued_at).toBe(wait!.queued_at);
  // a session given by YOKE_SESSION_ID is named in the command, which must act as it from any shell
  const fromEnv = await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab'], { YOKE_SESSION_ID: 'q2' });
  expect(fromEnv.stderr).toContain('yoke coordination-claim acquire --key QA_HOST:lab --session q2');
  const q2 = json<Record<string, unknown>[]>(await run(['test-machine', 'waits', 'lab', '--json'])).find(
    (w) => w.session_id === 'q2',
  );
  expect(q2).toMatchObject({ resume_command: 'yoke coordination-claim acquire --key QA_HOST:lab --session q2' });
});

test('W7 acquire --wait blocks showing its position, is woken when the holder releases, and takes the turn', async () => {
  const holder = json<{ claim_id: number }[]>(
    await run(['coordination-claim', 'list', '--key', 'QA_HOST:lab', '--active-only', '--json']),
  )[0]!;
  // q2 queues behind q1 and waits; q1 is woken first and takes its turn with the same command
  const { done: waiting } = await waitingInLine('q2', ['--json']);
  const released = await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(holder.claim_id),
    '--reason',
    'suite done',
    '--session',
    'w1',
    '--json',
  ]);
  expect(json(released).reservations).toEqual([expect.objectContaining({ session_id: 'q1' })]);
  const q1 = await run([
    'claims',
    'coordination-claim',
    'acquire',
    '--key',
    'QA_HOST:lab',
    '--session',
    'q1',
    '--json',
  ]);
  expect(json(q1)).toMatchObject({ session_id: 'q1', consumed_reservation: true });
  await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(json(q1).claim_id),
    '--reason',
    'done',
    '--session',
    'q1',
  ]);
  const q2 = await waiting;
  expect(q2.code).toBe(0);
  expect(json(q2)).toMatchObject({ session_id: 'q2', consumed_reservation: true });
  await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(json(q2).claim_id),
    '--reason',
    'done',
    '--session',
    'q2',
  ]);
}, 60_000);

test('W7 without --json, --wait shows position and elapsed time while it waits', async () => {
  const held = json(await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab', '--session', 'w1', '--json']));
  const { done: waiting } = await waitingInLine('q1');
  await new Promise((r) => setTimeout(r, 1_500)); // let it print a progress line
  await run(['claims', 'work', 'release', '--claim-id', String(held.claim_id), '--reason', 'done', '--session', 'w1']);
  const r = await waiting;
  expect(r.code).toBe(0);
  expect(r.stderr).toMatch(/waiting for QA_HOST:lab: position 1 of 1, \d+s/);
  expect(r.stdout).toMatch(/^took your reserved turn: claim \d+: QA_HOST:lab/);
  await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(/claim (\d+)/.exec(r.stdout)![1]),
    '--reason',
    'done',
    '--session',
    'q1',
  ]);
}, 60_000);

test('W9 a --wait whose session ends exits wait_cancelled (session_ended); its recovery joins as a new session, never the ended one', async () => {
  await setUp(run, [['sessions', 'register', '--session', 'gone', '--actor', 'dave', '--project', 'web']]);
  const held = json(await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab', '--session', 'w1', '--json']));
  const { done: waiting } = await waitingInLine('gone');
  expect((await run(['sessions', 'end', '--session', 'gone'])).code).toBe(0);
  const r = await waiting;
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('wait_cancelled');
  expect(r.stderr).toContain('(session_ended)');
  expect(r.stderr).toContain('register a new one');
  expect(r.stderr).toContain('yoke coordination-claim acquire --key QA_HOST:lab --session NEW --wait');
  expect(r.stderr).not.toContain('--session gone --wait');
  await run(['claims', 'work', 'release', '--claim-id', String(held.claim_id), '--reason', 'done', '--session', 'w1']);
}, 60_000);

test('W9 issue 3: sessions end of a session whose turn is reserved lists that turn among its released claims, and the machine passes to the next live waiter', async () => {
  await setUp(run, [
    ['sessions', 'register', '--session', 'e0', '--actor', 'erin', '--project', 'web'],
    ['sessions', 'register', '--session', 'e1', '--actor', 'erin', '--project', 'web'],
    ['sessions', 'register', '--session', 'e2', '--actor', 'frank', '--project', 'web'],
  ]);
  expect((await run(addArgs('lab-w9', ['--host-key-file', host.hostKeyFile]))).code).toBe(0);
  const acquire = (sid: string) =>
    run(['claims', 'coordination-claim', 'acquire', '--key', 'QA_HOST:lab-w9', '--session', sid, '--json']);
  const held = json<{ claim_id: number }>(await acquire('e0'));
  expect((await acquire('e1')).code).toBe(1);
  expect((await acquire('e2')).code).toBe(1);
  await run(['claims', 'work', 'release', '--claim-id', String(held.claim_id), '--reason', 'done', '--session', 'e0']);
  const turn = json<{ session_id: string; claim_id: number }[]>(
    await run(['test-machine', 'waits', 'lab-w9', '--json']),
  )[0]!;
  expect(turn.session_id).toBe('e1');
  const ended = json<{ released_claims: { claim_id: number; key: string }[] }>(
    await run(['sessions', 'end', '--session', 'e1', '--json']),
  );
  expect(ended.released_claims).toEqual([expect.objectContaining({ claim_id: turn.claim_id, key: 'QA_HOST:lab-w9' })]);
  const text = await run(['test-machine', 'waits', 'lab-w9', '--json']);
  expect(json<{ session_id: string; state: string }[]>(text).map((x) => [x.session_id, x.state])).toEqual([
    ['e2', 'reserved'],
  ]);
  await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(json(await acquire('e2')).claim_id),
    '--reason',
    'done',
    '--session',
    'e2',
  ]);
}, 60_000);

test('W9 issue 3: a --wait whose machine is removed exits wait_cancelled (test_machine_removed) without telling it to join a line that is gone', async () => {
  // an unhealthy, free machine (nobody holds it, so an admin may remove it) with a session waiting for it
  await setUp(run, [addArgs('lab-gone-soon', ['--host-key-file', host.hostKeyFile, '--verify-command', 'false'])]);
  expect((await run(['test-machine', 'verify', 'lab-gone-soon', '--session', 'op'])).code).toBe(1);
  const { done: waiting } = await waitingInLine('q1', [], 'lab-gone-soon');
  expect((await run(['test-machine', 'remove', 'lab-gone-soon'])).stdout).toContain('cancelled 1 wait(s)');
  const r = await waiting;
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('wait_cancelled');
  expect(r.stderr).toContain('(test_machine_removed)');
  expect(r.stderr).toContain(
    'recovery: lab-gone-soon is no longer a test machine: choose another (yoke test-machine list)',
  );
  expect(r.stderr).not.toContain('join again');
}, 60_000);

test('W2 W3 test-machine verify records the verification over SSH; failures exit 1 naming the reason', async () => {
  const ok = await run(['test-machine', 'verify', 'lab', '--session', 'op', '--json']);
  expect(ok.code).toBe(0);
  expect(json(ok).check).toMatchObject({ kind: 'verification', passed: true, reason: 'passed' });
  const golden = await run(['test-machine', 'golden-capture', 'lab', '--session', 'op', '--json']);
  expect(json(golden).check).toMatchObject({ kind: 'golden_capture', passed: true });

  rmSync(join(host.dir, 'healthy'));
  const failed = await run(['test-machine', 'verify', 'lab', '--session', 'op']);
  expect(failed.code).toBe(1);
  expect(failed.stderr).toMatch(/^verification_failed: verification of lab failed: exit_status_1/m);
  writeFileSync(join(host.dir, 'healthy'), '');

  await host.stop();
  const down = await run(['test-machine', 'verify', 'lab', '--session', 'op', '--json']);
  expect(down.code).toBe(1);
  expect(json(down).check).toMatchObject({ passed: false, reason: 'ssh_unavailable' });
  expect(
    json<{ name: string; healthy: boolean }[]>(await run(['test-machine', 'list', '--json'])).find(
      (m) => m.name === 'lab',
    )!.healthy,
  ).toBe(false);
  await host.start();
  expect((await run(['test-machine', 'verify', 'lab', '--session', 'op'])).code).toBe(0);
}, 60_000);

test('W8 issue 3: a failed verify and an acquire refused on an unhealthy host name the verify that serves the line; running that hint reserves the turn', async () => {
  const acquireW8 = ['claims', 'coordination-claim', 'acquire', '--key', 'QA_HOST:lab-w8', '--session', 'q1', '--json'];
  expect((await run(addArgs('lab-w8', ['--host-key-file', host.hostKeyFile]))).code).toBe(0);
  rmSync(join(host.dir, 'healthy'));
  try {
    const failed = await run(['test-machine', 'verify', 'lab-w8', '--session', 'op', '--json']);
    expect(failed.code).toBe(1);
    expect(jsonError(failed).recovery).toContain('yoke test-machine verify lab-w8 --session op');
    const refused = await run(acquireW8);
    expect(refused.code).toBe(1);
    expect(jsonError(refused).code).toBe('test_machine_unhealthy');
    expect(jsonError(refused).recovery).toContain('yoke test-machine verify lab-w8 --session q1');
  } finally {
    writeFileSync(join(host.dir, 'healthy'), '');
  }
  // The hint as given: the passing verify serves the line, reserving q1's turn, which q1 then takes.
  expect((await run(['test-machine', 'verify', 'lab-w8', '--session', 'q1'])).code).toBe(0);
  const line = json<{ session_id: string; state: string }[]>(await run(['test-machine', 'waits', 'lab-w8', '--json']));
  expect(line.map((x) => [x.session_id, x.state])).toEqual([['q1', 'reserved']]);
  const took = await run(acquireW8);
  expect(json(took)).toMatchObject({ consumed_reservation: true });
  await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(json(took).claim_id),
    '--reason',
    'done',
    '--session',
    'q1',
  ]);
}, 60_000);

test("I13 the worker logs in only with its own keys: a credential it has no key for, or one linking to another user's key outside its key directory, fails verify credential_unknown", async () => {
  symlinkSync(host.identityFile, join(testKeyDir, 'escape'));
  for (const [machine, credential] of [
    ['lab-nokey', 'nokey'],
    ['lab-link', 'escape'],
  ] as const) {
    const added = await run([...addArgs(machine, ['--host-key-file', host.hostKeyFile]), '--credential', credential]);
    expect(json(added)).toMatchObject({ name: machine, credential });
    const r = await run(['test-machine', 'verify', machine, '--session', 'op', '--json']);
    expect(r.code).toBe(1);
    expect(json(r).check).toMatchObject({ passed: false, reason: 'credential_unknown' });
    expect(jsonError(r)).toMatchObject({ code: 'credential_unknown' });
    expect(jsonError(r).recovery).toContain('YOKE_SSH_KEY_DIR');
  }
}, 60_000);

test('verify without a worker on the task queue exits 3 naming the queue; remove refuses a held machine', async () => {
  const noWorker = await run(['test-machine', 'verify', 'lab', '--session', 'op', '--json'], {
    YOKE_TASK_QUEUE: 'nobody-polls-this',
  });
  expect(noWorker.code).toBe(3);
  expect(jsonError(noWorker)).toMatchObject({ code: 'no_worker', details: { task_queue: 'nobody-polls-this' } });

  const held = json(
    await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-tofu', '--session', 'w1', '--json']),
  );
  const busy = await run(['test-machine', 'remove', 'lab-tofu', '--json']);
  expect(busy.code).toBe(1);
  expect(jsonError(busy).code).toBe('test_machine_in_use');
  await run(['claims', 'work', 'release', '--claim-id', String(held.claim_id), '--reason', 'done', '--session', 'w1']);
  expect((await run(['test-machine', 'remove', 'lab-tofu'])).code).toBe(0);
});

test("I3 test-machine add --identity-file without --credential copies the key into the worker's key directory as the machine's name, records that credential and notes it; the worker logs in with the copy", async () => {
  const base = (name: string, extra: string[]) => addArgs(name, extra, ['--identity-file', host.identityFile]);
  // the quick-start form: trust on first use with the given key, then the worker verifies with its copy
  const added = await run(base('LAB-Copy', []));
  expect(added.code).toBe(0);
  const keyFile = join(testKeyDir, 'lab-copy');
  expect(json(added)).toMatchObject({
    name: 'lab-copy',
    credential: 'lab-copy',
    host_key_source: 'trust_on_first_use',
    credential_key_file: keyFile,
  });
  expect(json(added).note).toContain(keyFile);
  expect(added.stderr).toMatch(/^note: copied .* to .*lab-copy .*recorded credential lab-copy/m);
  expect(readFileSync(keyFile)).toEqual(readFileSync(host.identityFile));
  expect(statSync(keyFile).mode & 0o777).toBe(0o600);
  const verified = await run(['test-machine', 'verify', 'lab-copy', '--session', 'op', '--json']);
  expect(json(verified).check).toMatchObject({ passed: true });

  // a key directory that does not exist yet is made, mode 700
  const freshDir = join(mkdtempSync(join(tmpdir(), 'yoke-keys-')), 'ssh-keys');
  const fresh = await run(base('lab-fresh', ['--host-key-file', host.hostKeyFile]), { YOKE_SSH_KEY_DIR: freshDir });
  expect(json(fresh)).toMatchObject({ credential: 'lab-fresh', credential_key_file: join(freshDir, 'lab-fresh') });
  expect(statSync(freshDir).mode & 0o777).toBe(0o700);
  expect(statSync(join(freshDir, 'lab-fresh')).mode & 0o777).toBe(0o600);

  // the same key already there under that name is reused; a different one is never overwritten
  expect((await run(['test-machine', 'remove', 'lab-fresh'])).code).toBe(0);
  const again = await run(base('lab-fresh', ['--host-key-file', host.hostKeyFile]), { YOKE_SSH_KEY_DIR: freshDir });
  expect(again.code).toBe(0);
  expect(json(again).note).toContain('already at');
  writeFileSync(join(testKeyDir, 'lab-clash'), 'another key\n', { mode: 0o600 });
  const clash = await run(base('lab-clash', ['--host-key-file', host.hostKeyFile]));
  expect(clash.code).toBe(1);
  expect(jsonError(clash)).toMatchObject({ code: 'credential_key_exists', details: { credential: 'lab-clash' } });
  expect(jsonError(clash).recovery).toContain('--credential lab-clash');
  expect(readFileSync(join(testKeyDir, 'lab-clash'), 'utf8')).toBe('another key\n');

  // a machine that is not added leaves no key behind
  const exists = await run(base('lab-copy', ['--host-key-file', host.hostKeyFile]));
  expect(jsonError(exists).code).toBe('test_machine_exists');
  expect(existsSync(keyFile)).toBe(true);
  // issue 3: the same name with another key is still the machine that exists, not a key clash
  const otherKey = join(mkdtempSync(join(tmpdir(), 'yoke-other-')), 'id');
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', otherKey]);
  const existsOtherKey = await run(
    addArgs('lab-copy', ['--host-key-file', host.hostKeyFile], ['--identity-file', otherKey]),
  );
  expect(jsonError(existsOtherKey)).toMatchObject({
    code: 'test_machine_exists',
    details: { test_machine: 'lab-copy' },
  });
  expect(jsonError(existsOtherKey).recovery).toContain('yoke test-machine repin lab-copy');
  expect(readFileSync(keyFile)).toEqual(readFileSync(host.identityFile));
  const unreachable = await run(base('lab-gone', []).map((a) => (a === String(host.port) ? '1' : a)));
  expect(jsonError(unreachable).code).toBe('ssh_unavailable');
  expect(existsSync(join(testKeyDir, 'lab-gone'))).toBe(false);

  // both given: the credential is recorded and the identity file only pins the host key (nothing copied)
  const both = await run([...base('lab-both', []), '--credential', host.credential]);
  expect(json(both)).toMatchObject({ name: 'lab-both', credential: host.credential });
  expect(json(both).note).toBeUndefined();
  expect(existsSync(join(testKeyDir, 'lab-both'))).toBe(false);
  const names = json<{ name: string }[]>(await run(['test-machine', 'list', '--json'])).map((m) => m.name);
  expect(names).not.toContain('lab-clash');
}, 60_000);

test('W5 W7 issue 3: test-machine waits numbers the line from 1 with the reserved turn first, the same in text, --json and a refused acquire', async () => {
  await setUp(run, [
    addArgs('lab-line', ['--host-key-file', host.hostKeyFile]),
    ['sessions', 'register', '--session', 'q3', '--actor', 'erin', '--project', 'web'],
  ]);
  const acquire = (session: string) =>
    run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-line', '--session', session, '--json']);
  const held = json(await acquire('w1'));
  expect(jsonError(await acquire('q1')).details.wait).toMatchObject({ position: 1 });
  expect(jsonError(await acquire('q2')).details.wait).toMatchObject({ position: 2 });
  await run(['claims', 'work', 'release', '--claim-id', String(held.claim_id), '--reason', 'done', '--session', 'w1']);

  // q1's turn is reserved: it is first in line (1), q2 behind it (2); nobody is numbered 0
  const line = json<{ session_id: string; state: string; position: number }[]>(
    await run(['test-machine', 'waits', 'lab-line', '--json']),
  );
  expect(line.map((w) => [w.position, w.session_id, w.state])).toEqual([
    [1, 'q1', 'reserved'],
    [2, 'q2', 'waiting'],
  ]);
  const rows = (await run(['test-machine', 'waits', 'lab-line'])).stdout.trim().split('\n').slice(1);
  expect(rows.map((r) => r.split(/\s+/).slice(0, 4))).toEqual([
    ['lab-line', '1', 'q1', 'reserved'],
    ['lab-line', '2', 'q2', 'waiting'],
  ]);
  // a newcomer is told the place the line lists for it, counting the reserved turn ahead
  const third = await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-line', '--session', 'q3']);
  expect(third.code).toBe(1);
  expect(third.stderr).toContain('joined the waiting line at position 3');
  expect(third.stderr).toContain('you are number 3 in line');
  const after = json<{ session_id: string; position: number }[]>(
    await run(['test-machine', 'waits', 'lab-line', '--json']),
  );
  expect(after.map((w) => [w.position, w.session_id])).toEqual([
    [1, 'q1'],
    [2, 'q2'],
    [3, 'q3'],
  ]);
});

/** `acquire --wait` on QA_HOST:<machine> (lab) run in the background, returned once its wait is in that line. */
async function waitingInLine(
  session: string,
  extra: string[] = [],
  machine = 'lab',
): Promise<{ done: Promise<CliResult> }> {
  const done = runInBackground([
    'coordination-claim',
    'acquire',
    '--key',
    `QA_HOST:${machine}`,
    '--session',
    session,
    '--wait',
    ...extra,
  ]);
  await until(
    async () =>
      json<{ session_id: string }[]>(await run(['test-machine', 'waits', machine, '--json'])).some(
        (x) => x.session_id === session,
      ),
    `${session} in the line of ${machine}`,
  );
  return { done };
}

function runInBackground(args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [yokeBin, ...args], {
      env: { PATH: process.env.PATH, DATABASE_URL: t.url, ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

test('W3 W8 issue 3 a re-imaged machine is re-pinned in place: repin keeps its waiting line, its failed verification stands until a verify with the new key passes, and the change is audited', async () => {
  const keys = mkdtempSync(join(tmpdir(), 'yoke-repin-'));
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keys, 'old_host_key')]);
  expect((await run(addArgs('lab-rp', ['--host-key-file', join(keys, 'old_host_key.pub')]))).code).toBe(0);
  // the refusal's recovery re-pins in place, never remove-and-add (which cancels the line)
  const mismatch = jsonError(await run(['test-machine', 'verify', 'lab-rp', '--session', 'op', '--json']));
  expect(mismatch.code).toBe('host_key_mismatch');
  expect(mismatch.recovery).toContain('yoke test-machine repin lab-rp --host-key-file');
  expect(mismatch.recovery).not.toContain('remove');
  const machine = async () =>
    json<{ name: string; healthy: boolean; waiting: number; last_verification: { reason: string | null } }[]>(
      await run(['test-machine', 'list', '--json']),
    ).find((m) => m.name === 'lab-rp')!;
  expect(await machine()).toMatchObject({ healthy: false, last_verification: { reason: 'host_key_mismatch' } });
  // q1 waits for it and keeps its place when its own wait times out
  const waited = await run([
    ...['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-rp', '--session', 'q1'],
    ...['--wait', '--wait-timeout', '1', '--json'],
  ]);
  expect(jsonError(waited).code).toBe('wait_timeout');
  expect(waited.code).toBe(3); // issue 10: every bounded CLI wait exits 3 with the reason
  const repinned = await run(['test-machine', 'repin', 'lab-rp', '--host-key-file', host.hostKeyFile, '--json']);
  expect(repinned.code).toBe(0);
  const view = json<{ host_key_fingerprint: string; previous_host_key_fingerprint: string }>(repinned);
  expect(view).toMatchObject({ name: 'lab-rp', host_key_source: 'host_key_file', healthy: false, waiting: 1 });
  expect(view.host_key_fingerprint).not.toBe(view.previous_host_key_fingerprint);
  const waits = json<{ session_id: string }[]>(await run(['test-machine', 'waits', 'lab-rp', '--json']));
  expect(waits.map((x) => x.session_id)).toEqual(['q1']);
  const verified = await run(['test-machine', 'verify', 'lab-rp', '--session', 'op', '--json']);
  expect(json(verified)).toMatchObject({ check: { passed: true } });
  const events = json<{ payload: Record<string, unknown> }[]>(
    await run(['events', 'list', '--type', 'TestMachineRepinned', '--json']),
  );
  expect(events.map((e) => e.payload)).toEqual([
    { test_machine: 'lab-rp', from: view.previous_host_key_fingerprint, to: view.host_key_fingerprint },
  ]);
  // a machine nobody added is named as such
  expect(
    jsonError(await run(['test-machine', 'repin', 'nosuch', '--host-key-file', host.hostKeyFile, '--json'])).code,
  ).toBe('test_machine_unknown');
});

test('W3 issue 3 Ctrl-C on test-machine verify cancels the check: the machine is released before exit 130, nothing is recorded', async () => {
  const started = join(host.dir, `slow-started-${process.pid}`);
  const added = await run([
    ...addArgs('lab-slow').filter((a, i, all) => a !== '--verify-command' && all[i - 1] !== '--verify-command'),
    '--verify-command',
    `touch ${started}; sleep 300`,
  ]);
  expect(added.code).toBe(0);
  const child = spawn(process.execPath, [yokeBin, 'test-machine', 'verify', 'lab-slow', '--session', 'op'], {
    env: { PATH: process.env.PATH, DATABASE_URL: t.url, ...env },
  });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  await until(async () => existsSync(started), 'the verify command to start on the host');
  child.kill('SIGINT');
  expect(await exited).toBe(130);
  expect(stderr).toContain('cancelling the verification of lab-slow');
  const machine = async () =>
    json<{ name: string; holder: unknown; last_verification: unknown }[]>(
      await run(['test-machine', 'list', '--json']),
    ).find((m) => m.name === 'lab-slow')!;
  // released by the time the command exits, as its message says: not a moment later
  expect(await machine()).toMatchObject({ holder: null, last_verification: null });
}, 120_000);

test('W3 issue 3 test-machine add --credential warns when the key directory has no key of that name (verify would say credential_unknown); the machine is added', async () => {
  const r = await run(addArgs('lab-keyless', ['--host-key-file', host.hostKeyFile], ['--credential', 'no-such-key']));
  expect([r.code, r.stdout]).toEqual([0, expect.stringContaining('"name": "lab-keyless"')]);
  expect(r.stderr).toContain('SSH credential no-such-key: the worker has no key of that name');
  const known = await run(addArgs('lab-haskey', ['--host-key-file', host.hostKeyFile]));
  expect(known.code).toBe(0);
  expect(known.stderr).not.toContain('warning');
});
