import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { actorFactory } from '../helpers/actors';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke, type CliResult } from '../helpers/cli';
import { releaseDefinition, releaseRunArgs, writeDefinition } from '../helpers/runs';
import { placeCredential } from '../helpers/sshKeys';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';

/**
 * Defects a fourth audit found in issues 9, 11 and 13 (and the machines-usage leftover), each
 * driven through the built binary as a user runs it.
 */
let t: TestDatabase;
const actors = actorFactory(() => t.url);
const env = () => ({ TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: 'audit-c4-cli' });
/** A command line written as one string (no argument holds a space). */
const words = (line: string): string[] => line.split(' ');
const run = (args: string[], session = 'd1'): Promise<CliResult> =>
  yoke(t.url, args, { ...env(), YOKE_SESSION_ID: session });

beforeAll(async () => {
  t = await createTestDatabase();
  const web = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: 'http://stage.example.test',
    prodUrl: 'https://web.example.test',
  });
  await setUp(run, [
    ['apply', '-f', writeDefinition(web)],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver', '--project', 'web'],
    ['sessions', 'register', '--session', 'd2', '--actor', 'bob', '--project', 'web'],
  ]);
}, 120_000);

afterAll(async () => {
  await actors.removeAll();
  await t.drop();
});

interface MachineRow {
  machine_id: string;
  '24H TOKENS': number | null;
  '24H API COST': number | null;
  '24H SESSIONS': number;
  cost_status: string;
  usage_status: string;
  measured_sessions: number;
}

test('U10 U13 machines usage: a machine whose sessions were never folded is not measured (tokens and cost null, usage_status unavailable), never 0; a real zero stays 0; a partly measured machine says how many sessions its sum covers', async () => {
  const dir = fixtureDir();
  const fold = async (session: string, rows: object[]) => {
    const file = join(dir, `${session}.jsonl`);
    writeLines(file, rows);
    const r = await run(['hooks', 'usage', '--session', session, '--harness', 'claude', '--artifact', file, '--json']);
    expect(r.code).toBe(0);
    expect(json(r).status).toBe('measured');
  };
  await setUp(run, [
    ['sessions', 'register', '--session', 'n1', '--actor', 'amy', '--harness', 'claude', '--machine', 'box-none'],
    ['sessions', 'register', '--session', 'n2', '--actor', 'amy', '--harness', 'claude', '--machine', 'box-none'],
    ['sessions', 'register', '--session', 'z1', '--actor', 'amy', '--harness', 'claude', '--machine', 'box-zero'],
    ['sessions', 'register', '--session', 'p1', '--actor', 'amy', '--harness', 'claude', '--machine', 'box-part'],
    ['sessions', 'register', '--session', 'p2', '--actor', 'amy', '--harness', 'claude', '--machine', 'box-part'],
  ]);
  await fold('z1', [claudeAssistant('z', { input: 0, output: 0 })]);
  await fold('p1', [claudeAssistant('p', { input: 1000, output: 200 })]);

  const r = await run(['machines', 'usage', '--json']);
  expect(r.code).toBe(0);
  const rows = Object.fromEntries(json<MachineRow[]>(r).map((m) => [m.machine_id, m]));
  expect(rows['box-none']).toEqual({
    machine_id: 'box-none',
    '24H TOKENS': null,
    '24H API COST': null,
    '24H SESSIONS': 2,
    cost_status: 'unavailable',
    usage_status: 'unavailable',
    measured_sessions: 0,
    cost_caveat: null,
  });
  expect(rows['box-zero']).toMatchObject({
    '24H TOKENS': 0,
    '24H API COST': 0,
    '24H SESSIONS': 1,
    usage_status: 'measured',
    measured_sessions: 1,
  });
  expect(rows['box-part']).toMatchObject({
    '24H TOKENS': 1200,
    '24H SESSIONS': 2,
    usage_status: 'partial',
    measured_sessions: 1,
  });

  const text = await run(['machines', 'usage']);
  const line = (machine: string) => text.stdout.split('\n').find((l) => l.startsWith(`${machine} `))!;
  expect(line('box-none')).toMatch(/^box-none\s+not measured\s+– \(unavailable\)\s+2$/);
  expect(line('box-zero')).toMatch(/^box-zero\s+0\s+\$0\.0000\s+1$/);
  expect(line('box-part')).toMatch(/^box-part\s+1200 \(1 of 2 sessions measured\)\s/);
});

test("R1 issue 9: ending the driver's session detaches it at once for approvals and QA verdicts too: another session without a seat is told steering_seat_required, not run_driven_elsewhere by the ended driver", async () => {
  const created = await run([...releaseRunArgs('a1b2c3d', 'r1-ended-driver', ['WEB-3']), '--json']);
  expect(created.code).toBe(0);
  const runId = json<{ run_id: string }>(created).run_id;
  await setUp(run, [['sessions', 'register', '--session', 'e1', '--actor', 'driver', '--project', 'web']]);
  // e1 drives the run (as its execute would make it)
  await t.db
    .updateTable('deployment_runs')
    .set({ driver_session_id: 'e1', driver_heartbeat_at: new Date() })
    .where('run_id', '=', runId)
    .execute();
  // While e1 drives, another actor's session is refused naming the driver.
  const whileDriven = await run(
    ['deployment-runs', 'qa-verdict', runId, '--check', 'smoke-test', '--status', 'passed', '--json'],
    'd2',
  );
  expect(whileDriven.code).toBe(1);
  expect(jsonError(whileDriven).code).toBe('run_driven_elsewhere');

  expect((await run(['sessions', 'end', '--session', 'e1'])).code).toBe(0);
  const get = json<{ driver: { session_id: string; live: boolean } }>(
    await run(['deployment-runs', 'get', runId, '--json']),
  );
  expect(get.driver).toMatchObject({ session_id: 'e1', live: false });
  const after = await run(
    ['deployment-runs', 'qa-verdict', runId, '--check', 'smoke-test', '--status', 'passed', '--json'],
    'd2',
  );
  expect(after.code).toBe(1);
  const err = jsonError(after);
  expect(err.code).toBe('steering_seat_required');
  expect(err.message).toContain('has no live driver');
  expect(err.message).not.toContain('driven by session e1');
});

test('D2 D5 member_closure reads a verbatim selection as admission does: a bare case id or a lower-case PREFIX-N/case selects its obligation (phases, targets)', async () => {
  const created = await run([
    ...releaseRunArgs('a1b2c3e', 'd2-verbatim', ['WEB-1', 'WEB-2']),
    '--requirement-id',
    'web-1/checkout-e2e',
    '--requirement-id',
    'gift-smoke',
    '--json',
  ]);
  expect(created.code).toBe(0);
  const runId = json<{ run_id: string }>(created).run_id;
  const closure = json<{
    member_closure: { members: { item: string; requirement_ids: string[]; phases: string[]; targets: string[] }[] };
  }>(await run(['deployment-runs', 'get', runId, '--include-member-closure', '--json'])).member_closure;
  const byItem = Object.fromEntries(closure.members.map((m) => [m.item, m]));
  expect(byItem['WEB-1']).toMatchObject({
    requirement_ids: ['web-1/checkout-e2e'],
    phases: ['post_deploy'],
    targets: ['stage'],
  });
  expect(byItem['WEB-2']).toMatchObject({
    requirement_ids: ['gift-smoke'],
    phases: ['post_deploy'],
    targets: ['stage'],
  });
});

test('D5 an explicit requirement id no member has is refused in plain words (no double negative)', async () => {
  const r = await run([...releaseRunArgs('a1b2c3f', 'd5-unknown', ['WEB-1']), '--requirement-id', 'nosuch', '--json']);
  expect(r.code).toBe(1);
  expect(jsonError(r)).toMatchObject({
    code: 'unknown_requirement',
    message: 'no member (WEB-1) has a QA case nosuch (from --requirement-id nosuch)',
  });
  // D5: an id naming an item the run does not carry says so, not that the item lacks the case
  const notMember = await run([
    ...releaseRunArgs('a1b2c3f', 'd5-not-member', ['WEB-1']),
    ...['--requirement-id', 'WEB-2/gift-smoke', '--json'],
  ]);
  expect(notMember.code).toBe(1);
  expect(jsonError(notMember)).toMatchObject({
    code: 'unknown_requirement',
    message: 'item WEB-2 is not a member of the run (members: WEB-1) (from --requirement-id WEB-2/gift-smoke)',
    recovery: 'add the item with --item WEB-2, or drop --requirement-id WEB-2/gift-smoke',
  });
});

test("C9 sessions end names the holder actor's own release for a kept sticky claim, not only an operator", async () => {
  await setUp(run, [
    ['sessions', 'register', '--session', 'h1', '--actor', 'driver', '--project', 'web'],
    words('coordination-claim acquire --key LIVE_DB_MIGRATION:orders --project web --item WEB-1 --session h1'),
  ]);
  const claimId = json<{ claim_id: number }[]>(
    await run(words('coordination-claim list --key LIVE_DB_MIGRATION:orders --project web --active-only --json')),
  )[0]!.claim_id;
  const ended = await run(['sessions', 'end', '--session', 'h1']);
  expect(ended.code).toBe(0);
  expect(ended.stdout).toContain(
    `kept sticky LIVE_DB_MIGRATION:orders (claim ${claimId}); release it from a live session of actor driver: yoke claims work release --claim-id ${claimId} --reason R --session S`,
  );
  // ... and that release works (C9): d1 is a live session of the same actor.
  const released = await run([
    'claims',
    'work',
    'release',
    '--claim-id',
    String(claimId),
    '--reason',
    'migrated',
    '--json',
  ]);
  expect(released.code).toBe(0);
});

test("I13 test machines are admins': a non-admin's test-machine add or remove is refused permission_denied before anything else (add dialled the host with the worker's key first, remove said to release another session's claim)", async () => {
  const keys = mkdtempSync(join(tmpdir(), 'audc4-keys-'));
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keys, 'k')]);
  placeCredential('lab-x', join(keys, 'k'));
  const added = await run([
    ...words('test-machine add lab-x --host 127.0.0.1 --port 22 --user qa --credential lab-x --host-key-file'),
    join(keys, 'k.pub'),
  ]);
  expect(added.code).toBe(0);
  expect((await run(['coordination-claim', 'acquire', '--key', 'QA_HOST:lab-x'])).code).toBe(0);

  const bob = await actors.add('bob');
  const env4 = env();
  // No --host-key-file: the CLI would pin on first use, dialling 127.0.0.1:1 with a key it has no copy of.
  const add = await bob.run(
    words('test-machine add lab-y --host 127.0.0.1 --port 1 --user qa --credential nokey --json'),
    env4,
  );
  expect(add.code).toBe(1);
  expect(jsonError(add)).toMatchObject({ code: 'permission_denied' });
  expect(jsonError(add).message).toContain('add test machine lab-y');
  const remove = await bob.run(['test-machine', 'remove', 'lab-x', '--json'], env4);
  expect(remove.code).toBe(1);
  expect(jsonError(remove)).toMatchObject({ code: 'permission_denied' });
  // nothing changed: lab-x is still there and still held by d1
  const list = json<{ name: string; holder: { session_id: string } | null }[]>(
    await run(['test-machine', 'list', '--json']),
  );
  expect(list.find((m) => m.name === 'lab-x')?.holder?.session_id).toBe('d1');
  expect(list.some((m) => m.name === 'lab-y')).toBe(false);
});
