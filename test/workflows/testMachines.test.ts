import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { temporalLineNotifier } from '../../temporal/lineSignals';
import type { CheckRecord, CheckOutcome } from '../../activities/testMachines';
import type { Reservation } from '../../activities/waitingLine';
import type { CheckKind } from '../../domain/checkKinds';
import { awaitTurn, checkWorkflowId, waitState, waitWorkflowId, type WaitSnapshot } from '../../workflows/definitions';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, seedLab, services, type Services } from '../helpers/fixtures';
import { startSshHost, type SshHost } from '../helpers/sshd';
import { startTestWorker, type TestWorker } from '../helpers/temporal';

const LIFETIME_MS = 1_500;
let t: TestDatabase;
let w: TestWorker;
let s: Services;
let alpha: SshHost;
let beta: SshHost;

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db, { reservationLifetimeMs: LIFETIME_MS });
  s = services(t.db, { reservationLifetimeMs: LIFETIME_MS, notifier: temporalLineNotifier(w.client, w.taskQueue) });
  [alpha, beta] = await Promise.all([startSshHost('alpha'), startSshHost('beta')]);
  await seedLab(s);
  for (const id of ['q1', 'q2', 'q3']) await s.registerSession({ sessionId: id, actorId: id, project: 'web' });
  const healthy = (h: SshHost) => `test -f ${join(h.dir, 'healthy')} && echo ok-${h.name}`;
  writeFileSync(join(alpha.dir, 'healthy'), '');
  writeFileSync(join(beta.dir, 'healthy'), '');
  await s.addTestMachine({
    name: 'alpha',
    host: alpha.host,
    port: alpha.port,
    user: alpha.user,
    credential: alpha.credential,
    hostKeyFile: alpha.hostKeyFile,
    verifyCommand: healthy(alpha),
    captureCommand: `echo golden-${alpha.name}`,
  });
  await s.addTestMachine({
    name: 'beta',
    host: beta.host,
    port: beta.port,
    user: beta.user,
    credential: beta.credential,
    verifyCommand: healthy(beta),
  });
}, 120_000);

afterAll(async () => {
  await Promise.all([alpha.stop(), beta.stop()]);
  await w.shutdown();
  await t.drop();
});

function check(testMachine: string, kind: CheckKind = 'verification', sessionId = 'op', worker: TestWorker = w) {
  return worker.client.workflow.execute('testMachineCheck', {
    workflowId: checkWorkflowId(testMachine, kind, randomUUID()),
    taskQueue: worker.taskQueue,
    args: [{ testMachine, sessionId, kind }],
  }) as Promise<{ check: CheckRecord; reservations: Reservation[]; outcome: CheckOutcome }>;
}

const acquire = (sessionId: string, machine: string) =>
  s.acquireCoordinationClaim({
    sessionId,
    key: `QA_HOST:${machine}`,
    join: { resumeCommand: `yoke coordination-claim acquire --key QA_HOST:${machine}` },
  });

async function healthOf(name: string): Promise<boolean> {
  const [m] = await s.listTestMachines({ name });
  return m!.healthy;
}

test('host keys are pinned from --host-key-file or on first use, with the ssh-keygen fingerprint', async () => {
  const [a, b] = [(await s.listTestMachines({ name: 'alpha' }))[0]!, (await s.listTestMachines({ name: 'beta' }))[0]!];
  const keygen = (h: SshHost) =>
    execFileSync('ssh-keygen', ['-l', '-f', h.hostKeyFile], { encoding: 'utf8' }).split(' ')[1];
  expect(a).toMatchObject({ host_key_source: 'host_key_file', host_key_fingerprint: keygen(alpha) });
  expect(b).toMatchObject({ host_key_source: 'trust_on_first_use', host_key_fingerprint: keygen(beta) });
});

test('W2 verify runs the verification command over SSH and records passed/failed, reason and output digest', async () => {
  const passed = await check('alpha');
  expect(passed.check).toMatchObject({ kind: 'verification', passed: true, reason: 'passed', exit_code: 0 });
  expect(passed.check.output_digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  expect(passed.outcome.output_excerpt).toContain('ok-alpha');
  const capture = await check('alpha', 'golden_capture');
  expect(capture.check).toMatchObject({ kind: 'golden_capture', passed: true });
  expect(capture.outcome.output_excerpt).toContain('golden-alpha');

  rmSync(join(alpha.dir, 'healthy'));
  const failed = await check('alpha');
  expect(failed.check).toMatchObject({ passed: false, reason: 'exit_status_1', exit_code: 1 });
  expect(await healthOf('alpha')).toBe(false);
  writeFileSync(join(alpha.dir, 'healthy'), '');
  expect((await check('alpha')).check.passed).toBe(true);
  expect(await healthOf('alpha')).toBe(true);
});

test('W3 W8 a stopped host records ssh_unavailable and is unhealthy; waiters wait for the successful verify, which wakes the oldest', async () => {
  await beta.stop();
  const down = await check('beta');
  expect(down.check).toMatchObject({ kind: 'verification', passed: false, reason: 'ssh_unavailable' });
  expect(await healthOf('beta')).toBe(false);

  // q1 and q2 join the unhealthy machine's line; each wait is a workflow
  expect((await refusalOf(acquire('q1', 'beta'))).code).toBe('test_machine_unhealthy');
  expect((await refusalOf(acquire('q2', 'beta'))).details.wait).toMatchObject({ position: 2 });
  const q1Wait = w.client.workflow.getHandle(waitWorkflowId('beta', 'q1'));
  expect((await q1Wait.query(waitState)).state).toBe('waiting');
  const woken = q1Wait.executeUpdate(awaitTurn);

  await beta.start();
  const up = await check('beta');
  expect(up.check.passed).toBe(true);
  expect(up.reservations.map((r) => r.session_id)).toEqual(['q1']);
  const turn: WaitSnapshot = await woken; // the release's signal woke the waiting caller
  expect(turn).toMatchObject({ state: 'reserved', turn: { claimId: up.reservations[0]!.claim_id } });

  const taken = await acquire('q1', 'beta');
  expect(taken.consumed_reservation).toBe(true);
  await s.releaseWorkClaim({ actingSessionId: 'q1', claimId: taken.claim.claim_id, reason: 'done' });
  expect((await s.listWaits({ testMachine: 'beta' })).map((x) => [x.session_id, x.state])).toEqual([
    ['q2', 'reserved'],
  ]);
  await s.endSession({ sessionId: 'q2' }); // W9: cancels q2's wait and frees its turn
  expect(await w.client.workflow.getHandle(waitWorkflowId('beta', 'q2')).result()).toMatchObject({
    state: 'cancelled',
    cancelReason: 'session_ended',
  });
}, 60_000);

test("W9 an unconsumed reservation expires by the wait workflow's timer and the host passes to the next live waiter", async () => {
  const held = await acquire('w1', 'alpha');
  await refusalOf(acquire('q3', 'alpha'));
  await refusalOf(acquire('w2', 'alpha'));
  const released = await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
  expect(released.reservations.map((r) => r.session_id)).toEqual(['q3']);
  // q3 never comes: its wait workflow expires the turn after the configured lifetime
  const q3 = await w.client.workflow.getHandle(waitWorkflowId('alpha', 'q3')).result();
  expect(q3).toMatchObject({ state: 'cancelled', cancelReason: 'reservation_expired' });
  expect((await s.listWaits({ testMachine: 'alpha' })).map((x) => [x.session_id, x.state])).toEqual([
    ['w2', 'reserved'],
  ]);
  const taken = await acquire('w2', 'alpha');
  expect(taken.consumed_reservation).toBe(true);
  await s.releaseWorkClaim({ actingSessionId: 'w2', claimId: taken.claim.claim_id, reason: 'done' });
}, 30_000);

test('W8 the holder verifying its own machine keeps its hold; the line does not move on mid-suite', async () => {
  const held = await acquire('w1', 'alpha');
  expect((await refusalOf(acquire('q3', 'alpha'))).code).toBe('claim_held');
  const own = await check('alpha', 'verification', 'w1');
  expect(own.check.passed).toBe(true);
  expect(own.reservations).toEqual([]);
  const [row] = await s.listClaims({ sessionId: 'w1', activeOnly: true });
  expect(row).toMatchObject({ claim_id: held.claim.claim_id });
  expect((await s.listWaits({ testMachine: 'alpha' })).map((x) => [x.session_id, x.state])).toEqual([
    ['q3', 'waiting'],
  ]);
  // a check by another session still takes and releases the machine as before
  const released = await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim.claim_id, reason: 'done' });
  expect(released.reservations.map((r) => r.session_id)).toEqual(['q3']);
  const taken = await acquire('q3', 'alpha');
  await s.releaseWorkClaim({ actingSessionId: 'q3', claimId: taken.claim.claim_id, reason: 'done' });
}, 60_000);

test('a changed host key is refused, never ignored: recorded as a failed verification host_key_mismatch', async () => {
  await alpha.rekey();
  const report = await check('alpha');
  expect(report.check).toMatchObject({ kind: 'verification', passed: false, reason: 'host_key_mismatch' });
  expect(await healthOf('alpha')).toBe(false);
});

test('a long SSH command heartbeats and is cancelled with its workflow; the machine is released', async () => {
  await s.addTestMachine({
    name: 'slow',
    host: beta.host,
    port: beta.port,
    user: beta.user,
    credential: beta.credential,
    hostKeyFile: beta.hostKeyFile,
    verifyCommand: 'sleep 60',
  });
  const handle = await w.client.workflow.start('testMachineCheck', {
    workflowId: checkWorkflowId('slow', 'verification', randomUUID()),
    taskQueue: w.taskQueue,
    args: [{ testMachine: 'slow', sessionId: 'op', kind: 'verification' }],
  });
  // wait until the command is running on the host (the check holds the machine)
  for (let i = 0; i < 100 && !(await s.listTestMachines({ name: 'slow' }))[0]!.holder; i++)
    await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, 2_500)); // past one heartbeat, so the cancellation can reach the activity
  const started = Date.now();
  await handle.cancel();
  await expect(handle.result()).rejects.toThrow();
  expect(Date.now() - started).toBeLessThan(20_000);
  expect((await handle.describe()).status.name).toBe('CANCELLED');
  const [slow] = await s.listTestMachines({ name: 'slow' });
  // released, and an interrupted check says nothing about the machine's health
  expect(slow).toMatchObject({ holder: null, healthy: true, last_verification: null });
}, 60_000);

test('W3 sshd dying mid-check (its connection dropped before the command reported an exit) is recorded ssh_unavailable, not signal_unknown', async () => {
  const dir = join(beta.dir, `dying-${randomUUID()}`);
  await s.addTestMachine({
    name: 'dying',
    host: beta.host,
    port: beta.port,
    user: beta.user,
    credential: beta.credential,
    hostKeyFile: beta.hostKeyFile,
    verifyCommand: `mkdir -p ${dir} && touch ${dir}/started && sleep 60`,
  });
  const report = check('dying');
  for (let i = 0; i < 200; i++) {
    try {
      execFileSync('test', ['-f', join(dir, 'started')]);
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await beta.stop(); // sshd and every session it serves die with the command still running
  try {
    const { check: recorded } = await report;
    expect(recorded).toMatchObject({ kind: 'verification', passed: false, reason: 'ssh_unavailable' });
    expect(await healthOf('dying')).toBe(false);
  } finally {
    await beta.start();
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

test('W3 a host that accepts TCP but never speaks SSH is recorded ssh_unavailable at the connect timeout, not taken for a dead worker', async () => {
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket)); // accepts, never sends a banner
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  // a handshake bound past the check's 6 s heartbeat timeout, as the default 10 s is
  const patient = await startTestWorker(t.db, { connectTimeoutMs: 9_000 });
  try {
    await s.addTestMachine({
      name: 'silent',
      host: '127.0.0.1',
      port: (silent.address() as AddressInfo).port,
      user: beta.user,
      credential: beta.credential,
      hostKeyFile: beta.hostKeyFile,
    });
    const { check: recorded } = await check('silent', 'verification', 'op', patient);
    expect(recorded).toMatchObject({ kind: 'verification', passed: false, reason: 'ssh_unavailable' });
    expect(await healthOf('silent')).toBe(false);
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
    await patient.shutdown();
  }
}, 60_000);
