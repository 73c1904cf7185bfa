import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke, yokeBin, type CliResult } from '../helpers/cli';
import { releaseDefinition, releaseRunArgs, writeDefinition } from '../helpers/runs';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';

/**
 * Defects a third audit found in issues 5, 9, 12 and 15, each driven through the built binary
 * as a user runs it.
 */
let t: TestDatabase;
const env = () => ({ TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: 'audit-c-cli' });
const run = (args: string[], session = 'd1'): Promise<CliResult> =>
  yoke(t.url, args, { ...env(), YOKE_SESSION_ID: session });

beforeAll(async () => {
  t = await createTestDatabase();
  const definition = releaseDefinition({
    project: 'web',
    prefix: 'WEB',
    stageUrl: 'http://stage.example.test',
    prodUrl: 'https://web.example.test',
  });
  // WEB-4 needs WEB-3 done; WEB-5 needs WEB-3 delivered to production.
  definition.items.push(
    { id: 'WEB-4', title: 'After docs', depends_on: [{ item: 'WEB-3' }] } as never,
    {
      id: 'WEB-5',
      title: 'After docs in production',
      depends_on: [{ item: 'WEB-3', environment: 'production' }],
    } as never,
  );
  await setUp(run, [
    ['apply', '-f', writeDefinition(definition)],
    ['projects', 'create', 'other', '--prefix', 'OTH'],
    ['sessions', 'register', '--session', 'd1', '--actor', 'driver', '--project', 'web', '--machine', 'm1'],
    ['sessions', 'register', '--session', 'd2', '--actor', 'bob', '--project', 'web', '--machine', 'm1'],
    ['sessions', 'register', '--session', 'x1', '--actor', 'xena', '--project', 'other', '--machine', 'm9'],
  ]);
}, 120_000);

afterAll(async () => t.drop());

test('issue 12 S3: items update lane refuses a relative or top-level path (settlement removes the lane recursively) with exit 2 and writes nothing', async () => {
  for (const lane of ['relative/lane', '.', '', '/', '/tmp', '/srv/../etc']) {
    const r = await run(['items', 'update', 'WEB-3', 'lane', lane, '--json']);
    expect(r.code).toBe(2);
    expect(jsonError(r)).toMatchObject({ code: 'invalid_lane_path', details: { field: 'lane', value: lane } });
  }
  expect(json(await run(['items', 'get', 'WEB-3', '--json'])).lane_path).toBeNull();
  const ok = await run(['items', 'update', 'WEB-3', 'lane', '/srv/lanes//web-3/', '--json']);
  expect(ok.code).toBe(0);
  expect(json(await run(['items', 'get', 'WEB-3', '--json'])).lane_path).toBe('/srv/lanes/web-3');
});

test('D7 I1 issue 12: create, its replay and add-item warn dependency_unsatisfied for a member whose dependency is not met, as validate does', async () => {
  const created = await run([...releaseRunArgs('c0ffee0000000001', 'dep-1', ['WEB-4']), '--json']);
  expect(created.code).toBe(0);
  expect(json(created).warnings).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ code: 'dependency_unsatisfied', item: 'WEB-4', depends_on: 'WEB-3' }),
    ]),
  );
  const text = await run(releaseRunArgs('c0ffee0000000002', 'dep-2', ['WEB-4']));
  expect(text.stdout).toContain('warning: WEB-4 depends on WEB-3 done');
  // I1: a replay under the same key answers with the same warnings as the create did
  const replayed = await run([...releaseRunArgs('c0ffee0000000001', 'dep-1', ['WEB-4']), '--json']);
  expect(json(replayed)).toMatchObject({ replayed: true, warnings: json(created).warnings });

  const empty = json(await run([...releaseRunArgs('c0ffee0000000003', 'dep-3'), '--json']));
  const added = await run(['deployment-runs', 'add-item', empty.run_id, 'WEB-5', '--json']);
  expect(added.code).toBe(0);
  expect(json(added).warnings).toEqual([
    expect.objectContaining({ code: 'dependency_unsatisfied', item: 'WEB-5', environment: 'production' }),
  ]);
  // A dependency closing in the same run is no warning (it is satisfied by the same commit).
  const both = json(await run([...releaseRunArgs('c0ffee0000000004', 'dep-4', ['WEB-3', 'WEB-4']), '--json']));
  expect(both.warnings.filter((w: { code: string }) => w.code === 'dependency_unsatisfied')).toEqual([]);
});

test('issue 12: the settlement replay of a run not yet executed names execute as its recovery, not a new run', async () => {
  const created = json(await run([...releaseRunArgs('c0ffee0000000005', 'created-1'), '--json']));
  const r = await run(['deployment-runs', 'update', created.run_id, 'status', 'succeeded', '--json']);
  expect(r.code).toBe(1);
  expect(jsonError(r)).toMatchObject({
    code: 'run_created',
    recovery: `execute it first: yoke deployment-runs execute ${created.run_id}`,
  });
});

test('B1 issue 15: one file is one path claim however it is spelled (./, //, /./, a trailing slash)', async () => {
  await setUp(run, [['claims', 'path', 'take', 'src/one.ts', '--project', 'web']]);
  for (const spelling of ['./src/one.ts', 'src//one.ts', 'src/./one.ts', 'src/one.ts/', 'src/././one.ts']) {
    const r = await run(['claims', 'path', 'take', spelling, '--project', 'web', '--json'], 'd2');
    expect(r.code).toBe(1);
    expect(jsonError(r).code).toBe('claim_held');
  }
  const released = await run(['claims', 'path', 'release', './src/./one.ts/', '--project', 'web']);
  expect(released.code).toBe(0);
});

test('issue 15: board --out naming a directory or a missing folder is a usage error (exit 2) naming --out', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-board-'));
  for (const out of [dir, join(dir, 'missing', 'BOARD.md')]) {
    const r = await run(['board', '--out', out, '--json']);
    expect(r.code).toBe(2);
    expect(jsonError(r)).toMatchObject({ code: 'out_file_unwritable', details: { option: '--out', value: out } });
  }
  const ok = await run(['board', '--out', join(dir, 'BOARD.md')]);
  expect(ok.code).toBe(0);
  expect(existsSync(join(dir, 'BOARD.md'))).toBe(true);
});

test('issue 15: serve on a port already taken is a usage error (exit 2) naming the port, not internal_error', async () => {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  try {
    const r = await run(['serve', '--port', String(port), '--json']);
    expect(r.code).toBe(2);
    expect(jsonError(r)).toMatchObject({
      code: 'listen_address_unavailable',
      details: { port, reason: 'EADDRINUSE' },
    });
  } finally {
    await new Promise((r) => server.close(r));
  }
});

test('issue 15: serve on a host name that does not resolve is a usage error (exit 2) naming the host, not a Postgres failure', async () => {
  const r = await run(['serve', '--port', '0', '--host', 'no-such-host.invalid', '--json']);
  expect(r.code).toBe(2);
  expect(jsonError(r)).toMatchObject({
    code: 'listen_address_unavailable',
    details: { host: 'no-such-host.invalid', reason: 'ENOTFOUND' },
  });
});

test('U2 issue 5: the status line never stores a window that is not a positive integer', async () => {
  const statusLine = (payload: object): Promise<CliResult> =>
    new Promise((resolve) => {
      const home = join(tmpdir(), `yoke-sl-${process.pid}`);
      mkdirSync(home, { recursive: true });
      const child = spawn(process.execPath, [yokeBin, 'hooks', 'status-line'], {
        env: { PATH: process.env.PATH, DATABASE_URL: t.url, YOKE_HOME: home },
      });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr: '' }));
      child.stdin.end(JSON.stringify(payload));
    });
  const served = async () =>
    json<{ session_id: string; served: { model: string | null; window: number | null } }[]>(
      await yoke(t.url, ['sessions', 'list', '--json']),
    ).find((s) => s.session_id === 'd2')!.served;

  expect(
    (await statusLine({ session_id: 'd2', model: { id: 'claude-x' }, context_window: { context_window_size: 200000 } }))
      .code,
  ).toBe(0);
  expect(await served()).toMatchObject({ model: 'claude-x', window: 200000 });
  for (const size of [-5, 0, 1.5, 'abc']) {
    const r = await statusLine({
      session_id: 'd2',
      model: { id: 'claude-x', display_name: 'X' },
      context_window: { context_window_size: size },
    });
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain(`${size} ctx`);
    expect(await served()).toMatchObject({ model: 'claude-x', window: 200000 });
  }
});

test('U12 issue 9: a pricing file reusing a shipped revision id is refused pricing_revision_immutable, and the shipped revision keeps pricing', async () => {
  const before = json<{ revision_id: string; effective_at: string; models: number }[]>(
    await yoke(t.url, ['pricing', 'list', '--json']),
  );
  const shipped = before.find((r) => r.revision_id.startsWith('genai-prices-'))!;
  const file = join(mkdtempSync(join(tmpdir(), 'yoke-prices-')), 'rev.json');
  writeFileSync(
    file,
    JSON.stringify({
      revision_id: shipped.revision_id,
      effective_at: new Date(Date.now() + 3_600_000).toISOString(),
      source: 'a file',
      rates: { m: { input: 0, cached_input: 0, cache_write: 0, cache_write_long: 0, output: 0 } },
    }),
  );
  const r = await yoke(t.url, ['pricing', 'import', file, '--json']);
  expect(r.code).toBe(1);
  expect(jsonError(r)).toMatchObject({
    code: 'pricing_revision_immutable',
    details: { revision_id: shipped.revision_id },
  });
  expect(json(await yoke(t.url, ['pricing', 'list', '--json']))).toEqual(before);
});

test('U5 issue 5: a fold naming another harness than the session registered is refused harness_mismatch and keeps the measured totals', async () => {
  const dir = fixtureDir();
  const transcript = join(dir, 'claude.jsonl');
  writeLines(transcript, [claudeAssistant('msg_1', { input: 100, output: 20 })]);
  const rollout = join(dir, 'rollout.jsonl');
  writeLines(rollout, [
    { timestamp: '2026-11-29T10:00:00Z', type: 'session_meta', payload: { id: 'thread-1', source: 'cli' } },
    {
      timestamp: '2026-11-29T10:00:01Z',
      type: 'event_msg',
      payload: {
        type: 'token_count',
        info: {
          total_token_usage: { input_tokens: 5, cached_input_tokens: 0, output_tokens: 1, reasoning_output_tokens: 0 },
        },
      },
    },
  ]);
  await setUp(run, [
    ['sessions', 'register', '--session', 'u1', '--actor', 'driver', '--harness', 'claude', '--machine', 'm1'],
    ['hooks', 'usage', '--session', 'u1', '--harness', 'claude', '--artifact', transcript],
  ]);
  const r = await run(['hooks', 'usage', '--session', 'u1', '--harness', 'codex', '--artifact', rollout, '--json']);
  expect(r.code).toBe(2);
  expect(jsonError(r)).toMatchObject({
    code: 'harness_mismatch',
    details: { session_id: 'u1', registered_harness: 'claude', harness: 'codex' },
  });
  const row = json<{ session_id: string; usage_tokens: number }[]>(
    await yoke(t.url, ['sessions', 'list', '--json']),
  ).find((s) => s.session_id === 'u1')!;
  expect(row.usage_tokens).toBe(120);
});

test('issue 9: usage report with --since after --until is a usage error (exit 2), not an all-zero report', async () => {
  const r = await yoke(t.url, [
    'usage',
    'report',
    '--by',
    'day',
    '--since',
    '2026-12-05',
    '--until',
    '2026-12-01',
    '--json',
  ]);
  expect(r.code).toBe(2);
  expect(jsonError(r)).toMatchObject({
    code: 'invalid_date_range',
    details: { since: '2026-12-05', until: '2026-12-01' },
  });
  // one day given to both is that whole day
  expect(
    (await yoke(t.url, ['usage', 'report', '--by', 'day', '--since', '2026-12-01', '--until', '2026-12-01'])).code,
  ).toBe(0);
});
