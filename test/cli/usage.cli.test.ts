import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { sql } from 'kysely';
import { join } from 'node:path';
import { actorFactory } from '../helpers/actors';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, yoke, yokeBin, type CliResult, setUp } from '../helpers/cli';
import { startTestWorker, type TestWorker } from '../helpers/temporal';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';
import { until } from '../helpers/until';

let t: TestDatabase;
let w: TestWorker;
let env: Record<string, string>;
let dir: string;
const actors = actorFactory(() => t.url);
const run = (args: string[], extra: Record<string, string> = {}) => yoke(t.url, args, { ...env, ...extra });

beforeAll(async () => {
  t = await createTestDatabase();
  w = await startTestWorker(t.db);
  env = { TEMPORAL_ADDRESS: process.env.YOKE_TEST_TEMPORAL_ADDRESS!, YOKE_TASK_QUEUE: w.taskQueue };
  dir = fixtureDir();
  await setUp(run, [
    [
      'sessions',
      'register',
      '--session',
      'c1',
      '--actor',
      'alice',
      '--harness',
      'claude',
      '--machine',
      'mac-1',
      '--model',
      'claude-opus-4-6',
    ],
    ['sessions', 'register', '--session', 'c2', '--actor', 'bob', '--harness', 'claude', '--machine', 'mac-1'],
  ]);
}, 60_000);

afterAll(async () => {
  await actors.removeAll();
  await w.shutdown();
  await t.drop();
});

function withStdin(args: string[], stdin: string, extra: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [yokeBin, ...args], {
      env: { PATH: process.env.PATH, DATABASE_URL: t.url, ...extra },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

test('U5 U12 hooks usage folds a transcript; sessions list --json carries usage_tokens, usage_status, usage_cost_usd, usage_cost_status, usage_note', async () => {
  const transcript = join(dir, 'c1.jsonl');
  writeLines(transcript, [claudeAssistant('m1', { input: 1_000_000, output: 100_000 }, { model: 'claude-opus-4-6' })]);
  const folded = await run([
    'hooks',
    'usage',
    '--session',
    'c1',
    '--harness',
    'claude',
    '--artifact',
    transcript,
    '--json',
  ]);
  expect(folded.code).toBe(0);
  expect(json(folded)).toMatchObject({ session_id: 'c1', status: 'measured', usage_tokens: 1_100_000 });
  const rows = json<Record<string, unknown>[]>(await run(['sessions', 'list', '--json']));
  expect(rows.find((r) => r.session_id === 'c1')).toMatchObject({
    usage_tokens: 1_100_000,
    usage_status: 'measured',
    usage_cost_usd: 7.5,
    usage_cost_status: 'priced',
    usage_note: expect.stringContaining('known undercount'),
    requested: { model: 'claude-opus-4-6' },
    served: { model: null },
  });
  expect(rows.find((r) => r.session_id === 'c2')).toMatchObject({
    usage_tokens: null,
    usage_status: 'unavailable',
    usage_cost_usd: null,
  });
});

test('U10 hooks usage --async hands the fold to session-usage/<session>, which runs requests in order', async () => {
  const transcript = join(dir, 'c2.jsonl');
  writeLines(transcript, [claudeAssistant('x1', { input: 10, output: 5 })]);
  const queued = await run([
    'hooks',
    'usage',
    '--session',
    'c2',
    '--harness',
    'claude',
    '--artifact',
    transcript,
    '--async',
    '--json',
  ]);
  expect(json(queued)).toEqual({ session_id: 'c2', queued: true, workflow_id: 'session-usage/c2' });
  writeLines(transcript, [claudeAssistant('x2', { input: 20, output: 5 })], true);
  await run(['hooks', 'usage', '--session', 'c2', '--harness', 'claude', '--artifact', transcript, '--async']);
  await until(
    async () =>
      json<Record<string, unknown>[]>(await run(['sessions', 'list', '--json'])).find((r) => r.session_id === 'c2')!,
    (row) => row.usage_tokens === 40,
    'the fold workflow to fold both requests',
    { everyMs: 200 },
  );
}, 60_000);

test("U10 I13 hooks usage --async for another actor's session is refused permission_denied before anything is signalled; the victim's usage is unchanged; with or without --async the refusal names the session's owner", async () => {
  const [alice, bob] = [await actors.add('alice'), await actors.add('bob')];
  const as = (who: typeof alice, args: string[]) => who.run([...args, '--json'], env);
  expect((await as(bob, ['sessions', 'register', '--session', 'bob-cc1', '--harness', 'claude'])).code).toBe(0);
  const bobs = join(dir, 'bob-cc1.jsonl');
  writeLines(bobs, [claudeAssistant('b1', { input: 1000, output: 140 })]);
  const own = await as(bob, ['hooks', 'usage', '--session', 'bob-cc1', '--harness', 'claude', '--artifact', bobs]);
  expect(json(own)).toMatchObject({ usage_tokens: 1140 });
  const alices = join(dir, 'alice-big.jsonl');
  writeLines(alices, [claudeAssistant('a1', { input: 200_000, output: 13_000 })]);
  const args = ['hooks', 'usage', '--session', 'bob-cc1', '--harness', 'claude', '--artifact', alices];
  for (const extra of [[], ['--async']]) {
    const refused = await as(alice, [...args, ...extra]);
    expect(refused.code).toBe(1);
    expect(jsonError(refused).code).toBe('permission_denied');
    // issue 13: named like the --async refusal, never the bare row-security message
    expect(jsonError(refused).message).toBe(
      `session bob-cc1 belongs to actor ${bob.name}; ${alice.name} cannot fold its usage`,
    );
  }
  await expect(w.client.workflow.getHandle('session-usage/bob-cc1').describe()).rejects.toThrow(/not found/i);
  const requests = await t.db.selectFrom('session_usage_fold_requests').selectAll().execute();
  expect(requests.filter((r) => r.session_id === 'bob-cc1')).toEqual([]);
  const row = json<Record<string, unknown>[]>(await run(['sessions', 'list', '--json'])).find(
    (r) => r.session_id === 'bob-cc1',
  );
  expect(row).toMatchObject({ usage_tokens: 1140 });
  // the owner's own --async still folds, through a request recorded under the owner's role
  writeLines(bobs, [claudeAssistant('b2', { input: 10, output: 0 })], true);
  expect(json(await as(bob, [...args.slice(0, -1), bobs, '--async']))).toEqual({
    session_id: 'bob-cc1',
    queued: true,
    workflow_id: 'session-usage/bob-cc1',
  });
  await until(
    async () =>
      json<Record<string, unknown>[]>(await run(['sessions', 'list', '--json'])).find(
        (r) => r.session_id === 'bob-cc1',
      )!,
    (r) => r.usage_tokens === 1150,
    "the owner's request to be folded",
    { everyMs: 200 },
  );
  const [settled] = await t.db
    .selectFrom('session_usage_fold_requests')
    .selectAll()
    .where('session_id', '=', 'bob-cc1')
    .execute();
  expect(settled).toMatchObject({ requested_by: bob.name, artifacts: [bobs], done_at: expect.any(Date) });
}, 60_000);

test('U10 I13 a signal to session-usage/<session> carries no authority: a forged payload or start input makes the worker open no path', async () => {
  await run(['sessions', 'register', '--session', 'victim', '--actor', 'vic', '--harness', 'claude']);
  const theirs = join(dir, 'victim.jsonl');
  writeLines(theirs, [claudeAssistant('v1', { input: 7, output: 3 })]);
  await run(['hooks', 'usage', '--session', 'victim', '--harness', 'claude', '--artifact', theirs]);
  const planted = join(dir, 'planted.jsonl');
  writeLines(planted, [claudeAssistant('p1', { input: 500_000, output: 500_000 })]);
  const forged = { harness: 'claude', artifacts: [planted] };
  const handle = await w.client.workflow.signalWithStart('sessionUsage', {
    workflowId: 'session-usage/victim',
    taskQueue: w.taskQueue,
    args: [{ sessionId: 'victim', pending: [forged] }],
    signal: 'foldRequested',
    signalArgs: [forged],
  });
  await handle.signal('foldRequested', forged);
  await until(
    async () => (await handle.fetchHistory()).events ?? [],
    (events) => events.filter((e) => e.activityTaskCompletedEventAttributes).length >= 1,
    'the nudged workflow to look for recorded requests',
    { everyMs: 200 },
  );
  const row = json<Record<string, unknown>[]>(await run(['sessions', 'list', '--json'])).find(
    (r) => r.session_id === 'victim',
  );
  expect(row).toMatchObject({ usage_tokens: 10 });
  await handle.terminate('test done');
}, 60_000);

test('U13 --usage-last-24h is exclusive of every other filter; machines usage sums per machine under the 24H labels', async () => {
  const both = await run(['sessions', 'list', '--usage-last-24h', '--active-only', '--json']);
  expect(both.code).toBe(2);
  expect(jsonError(both).code).toBe('usage_last_24h_exclusive');
  const cohort = json<{ session_id: string }[]>(await run(['sessions', 'list', '--usage-last-24h', '--json']));
  expect(cohort.map((r) => r.session_id).sort()).toEqual(['c1', 'c2']);
  const machines = await run(['machines', 'usage', '--json']);
  expect(json(machines)).toEqual([
    expect.objectContaining({
      machine_id: 'mac-1',
      '24H SESSIONS': 2,
      '24H TOKENS': expect.any(Number),
      '24H API COST': expect.any(Number),
    }),
  ]);
  const human = await run(['machines', 'usage']);
  expect(human.stdout).toMatch(/MACHINE\s+24H TOKENS\s+24H API COST\s+24H SESSIONS/);
});

test('U12 pricing import adds an immutable revision; pricing list shows the shipped one', async () => {
  const file = join(dir, 'rev.json');
  writeFileSync(
    file,
    JSON.stringify({
      revision_id: 'r-2027',
      effective_at: '2027-01-01T00:00:00Z',
      source: 'vendor sheet',
      rates: { 'claude-opus-4-6': { input: 4, output: 20 } },
    }),
  );
  expect(json(await run(['pricing', 'import', file, '--json']))).toEqual({
    revision_id: 'r-2027',
    imported: true,
    backdated: false,
  });
  const list = json<{ revision_id: string }[]>(await run(['pricing', 'list', '--json']));
  expect(list.map((r) => r.revision_id)).toEqual(['litellm-2025-12', 'genai-prices-0.1.8', 'r-2027']);
  writeFileSync(file, JSON.stringify({ revision_id: 'r-bad', effective_at: 'soon', source: 'x', rates: {} }));
  const bad = await run(['pricing', 'import', file]);
  expect(bad.code).toBe(2);
  expect(bad.stderr).toMatch(/^invalid_pricing_file: .*effective_at/);
});

test('U12 re-importing an identical pricing file is idempotent (jsonb keeps its own key order); other rates under the same id are refused', async () => {
  const file = join(dir, 'rev-2028.json');
  // keys in an order jsonb does not keep: it sorts keys by length, then bytes
  const revision = {
    revision_id: 'r-2028',
    effective_at: '2028-01-01T00:00:00Z',
    source: 'vendor sheet',
    rates: {
      'claude-opus-4-6': { output: 20, input: 4, above_200k: { output: 30, input: 8 } },
      'gpt-5': { output: 10, input: 1.25 },
    },
  };
  writeFileSync(file, JSON.stringify(revision));
  expect(json(await run(['pricing', 'import', file, '--json']))).toMatchObject({
    revision_id: 'r-2028',
    imported: true,
  });
  const again = await run(['pricing', 'import', file, '--json']);
  expect(again.code).toBe(0);
  expect(json(again)).toEqual({ revision_id: 'r-2028', imported: false });
  writeFileSync(
    file,
    JSON.stringify({ ...revision, rates: { ...revision.rates, 'gpt-5': { output: 11, input: 1.25 } } }),
  );
  const other = await run(['pricing', 'import', file, '--json']);
  expect(other.code).toBe(1);
  expect(jsonError(other).code).toBe('pricing_revision_immutable');
});

test('U10 hooks usage with a missing --artifact says unavailable with the reason (missing file), never usage_tokens 0', async () => {
  await run(['sessions', 'register', '--session', 'gone1', '--actor', 'gina', '--harness', 'claude']);
  const gone = join(dir, 'not-there.jsonl');
  const r = await run(['hooks', 'usage', '--session', 'gone1', '--harness', 'claude', '--artifact', gone, '--json']);
  expect(r.code).toBe(0);
  expect(json(r)).toMatchObject({
    session_id: 'gone1',
    status: 'unavailable',
    usage_tokens: null,
    reasons: [`artifact not found (missing file): ${gone}`],
  });
  const human = await run(['hooks', 'usage', '--session', 'gone1', '--harness', 'claude', '--artifact', gone]);
  expect(human.stdout).toContain('usage unavailable');
  expect(human.stdout).toContain('missing file');
  expect(human.stdout).not.toMatch(/\b0 tokens/);
});

test('U3 the status line attests the served model and window and prints model, window and tokens', async () => {
  const status = {
    session_id: 'c1',
    transcript_path: '/x',
    model: { id: 'claude-opus-4-6[1m]', display_name: 'Opus 4.6' },
    context_window: { context_window_size: 1_000_000, total_input_tokens: 5, total_output_tokens: 5 },
  };
  const r = await withStdin(['hooks', 'status-line'], JSON.stringify(status));
  expect(r.code).toBe(0);
  expect(r.stdout.trim()).toBe('Opus 4.6 · 1M ctx · 1.1M tokens');
  const [row] = json<{ served: { model: string; window: number } }[]>(await run(['sessions', 'list', '--json'])).filter(
    (s) => (s as unknown as { session_id: string }).session_id === 'c1',
  );
  expect(row!.served).toMatchObject({ model: 'claude-opus-4-6[1m]', window: 1_000_000 });
  const garbage = await withStdin(['hooks', 'status-line'], 'not json');
  expect(garbage.code).toBe(0);
  // U4: a session yoke does not know stores nothing, and the line says so instead of hiding it
  const stranger = await withStdin(['hooks', 'status-line'], JSON.stringify({ ...status, session_id: 'nobody-knows' }));
  expect(stranger.code).toBe(0);
  expect(stranger.stdout.trim()).toBe('Opus 4.6 · 1M ctx · 10 tokens · session nobody-knows not registered');
});

test('U3 the status line reaches Postgres through its Unix socket in both forms of URL the CLI takes (?host=/dir, or the directory percent-encoded as the host)', async () => {
  await setUp(run, [
    ['sessions', 'register', '--session', 'sock1', '--actor', 'alice', '--harness', 'claude', '--machine', 'mac-1'],
  ]);
  const { rows } = await sql<{ dirs: string }>`SELECT current_setting('unix_socket_directories') AS dirs`.execute(t.db);
  const socketDir = rows[0]!.dirs.split(',')[0]!.trim();
  const u = new URL(t.url);
  const [login, db, port] = [
    u.password ? `${u.username}:${u.password}` : u.username,
    u.pathname.slice(1),
    u.port || '5432',
  ];
  const forms = [
    `postgres://${login}@localhost:${port}/${db}?host=${socketDir}`,
    `postgres://${login}@${encodeURIComponent(socketDir)}:${port}/${db}`,
    `postgres://${login}@/${db}?host=${socketDir}&port=${port}`,
  ];
  for (const [i, url] of forms.entries()) {
    const model = `claude-socket-form-${i}`;
    const r = await withStdin(
      ['hooks', 'status-line'],
      JSON.stringify({ session_id: 'sock1', model: { id: model, display_name: 'Socket' } }),
      { DATABASE_URL: url, YOKE_HOME: fixtureDir() },
    );
    expect({ url, out: r.stdout.trim() }).toEqual({ url, out: 'Socket' });
    const served = await t.db
      .selectFrom('sessions')
      .select('served_model')
      .where('session_id', '=', 'sock1')
      .executeTakeFirstOrThrow();
    expect({ url, model: served.served_model }).toEqual({ url, model });
  }
});

test('U4 a status-line write the database refuses is recorded and retried by the next hook, never swallowed', async () => {
  const home = fixtureDir();
  await sql`CREATE SEQUENCE u4_refusals;
        CREATE FUNCTION u4_refuse_first() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF nextval('u4_refusals') = 1 THEN RAISE EXCEPTION 'u4: the first write is refused'; END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER u4_refuse_first BEFORE UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION u4_refuse_first();`.execute(
    t.db,
  );
  try {
    await run(['sessions', 'register', '--session', 'u4', '--actor', 'alice', '--harness', 'claude']);
    const served = async () =>
      await t.db
        .selectFrom('sessions')
        .select(['served_model', 'served_window'])
        .where('session_id', '=', 'u4')
        .executeTakeFirstOrThrow();
    const first = await withStdin(
      ['hooks', 'status-line'],
      JSON.stringify({
        session_id: 'u4',
        model: { id: 'claude-haiku-4-5', display_name: 'Haiku 4.5' },
        context_window: { context_window_size: 200_000 },
      }),
      { YOKE_HOME: home },
    );
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('served facts pending');
    expect(await served()).toEqual({ served_model: null, served_window: null });
    const pending = JSON.parse(readFileSync(join(home, 'pending-attestations', 'u4.json'), 'utf8'));
    expect(pending).toMatchObject({ model: 'claude-haiku-4-5', window: 200_000, attempts: 1 });
    expect(pending.error).toContain('the first write is refused');
    // the next hook carries no model: the pending facts are written, and the record cleared
    const next = await withStdin(['hooks', 'status-line'], JSON.stringify({ session_id: 'u4' }), { YOKE_HOME: home });
    expect(next.stdout).not.toContain('pending');
    expect(await served()).toEqual({ served_model: 'claude-haiku-4-5', served_window: 200_000 });
    expect(existsSync(join(home, 'pending-attestations', 'u4.json'))).toBe(false);
  } finally {
    await sql`DROP TRIGGER u4_refuse_first ON sessions`.execute(t.db);
  }
});

test('U4 a served-model hook that cannot reach Postgres keeps the facts under $YOKE_HOME (exit 0, as the status line) and the next hook writes them', async () => {
  const { createServer } = await import('node:net');
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as { port: number }).port;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const down = { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/x` };
  const home = fixtureDir();
  await run(['sessions', 'register', '--session', 'u1', '--actor', 'alice', '--harness', 'claude']);
  const file = join(home, 'pending-attestations', 'u1.json');
  const served = () =>
    t.db
      .selectFrom('sessions')
      .select(['served_model', 'served_window', 'served_effort'])
      .where('session_id', '=', 'u1')
      .executeTakeFirstOrThrow();

  const kept = await run(
    ['hooks', 'served-model', '--session', 'u1', '--model', 'm-x', '--window', '400000', '--effort', 'high', '--json'],
    { ...down, YOKE_HOME: home },
  );
  expect(kept.code).toBe(0);
  expect(json(kept)).toMatchObject({
    session_id: 'u1',
    served: { model: 'm-x', window: 400000, effort: 'high', attested_at: null },
    pending: { code: 'postgres_unreachable', attempts: 1 },
  });
  expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ model: 'm-x', window: 400000, effort: 'high' });
  expect(await served()).toEqual({ served_model: null, served_window: null, served_effort: null });
  // the next hook (here the status line, with no model of its own) writes them and clears the record
  const next = await withStdin(['hooks', 'status-line'], JSON.stringify({ session_id: 'u1' }), { YOKE_HOME: home });
  expect(next.stdout).not.toContain('pending');
  expect(await served()).toEqual({ served_model: 'm-x', served_window: 400000, served_effort: 'high' });
  expect(existsSync(file)).toBe(false);

  // and a served-model hook flushes what an earlier one kept: its own model wins, the kept effort fills in
  await run(['hooks', 'served-model', '--session', 'u1', '--model', 'm-y', '--effort', 'low'], {
    ...down,
    YOKE_HOME: home,
  });
  expect(existsSync(file)).toBe(true);
  const flushed = await run(['hooks', 'served-model', '--session', 'u1', '--model', 'm-z', '--json'], {
    YOKE_HOME: home,
  });
  expect(json(flushed).served).toMatchObject({ model: 'm-z', effort: 'low', window: 400000 });
  expect(existsSync(file)).toBe(false);

  // a usage hook (Codex has no status line) flushes them too
  await run(['hooks', 'served-model', '--session', 'u1', '--model', 'm-w'], { ...down, YOKE_HOME: home });
  expect(existsSync(file)).toBe(true);
  const transcript = join(dir, 'u1.jsonl');
  writeLines(transcript, [claudeAssistant('u1-1', { input: 1, output: 1 })]);
  const usage = await run(['hooks', 'usage', '--session', 'u1', '--harness', 'claude', '--artifact', transcript], {
    YOKE_HOME: home,
  });
  expect(usage.code).toBe(0);
  expect(await served()).toMatchObject({ served_model: 'm-w' });
  expect(existsSync(file)).toBe(false);
});

test('U4 the served-model hook settles served facts; an unregistered session is refused', async () => {
  const settled = await run([
    'hooks',
    'served-model',
    '--session',
    'c2',
    '--model',
    'claude-sonnet-4-5-20250929',
    '--window',
    '200000',
    '--json',
  ]);
  expect(settled.code).toBe(0);
  expect(json(settled)).toMatchObject({
    session_id: 'c2',
    served: { model: 'claude-sonnet-4-5-20250929', window: 200000, attested_at: expect.any(String) },
    requested: { model: null },
  });
  // U2: the served effort is stored apart from the requested one; U3: a later statement that
  // names no window or effort does not unlearn the attested ones
  const effort = await run([
    'hooks',
    'served-model',
    '--session',
    'c2',
    '--model',
    'claude-sonnet-4-5-20250929',
    '--effort',
    'high',
    '--json',
  ]);
  expect(json(effort).served).toMatchObject({ effort: 'high', window: 200000 });
  const bare = await run([
    'hooks',
    'served-model',
    '--session',
    'c2',
    '--model',
    'claude-sonnet-4-5-20250929',
    '--json',
  ]);
  expect(json(bare).served).toMatchObject({ model: 'claude-sonnet-4-5-20250929', effort: 'high', window: 200000 });
  expect(json(bare).requested).toMatchObject({ effort: null });
  const unknown = await run(['hooks', 'served-model', '--session', 'ghost', '--model', 'm', '--json']);
  expect(unknown.code).toBe(1);
  expect(jsonError(unknown).code).toBe('session_not_registered');
});

test('prices: the shipped revision comes from @pydantic/genai-prices, so Claude Haiku 4.5 is priced; pricing import --genai-prices names the installed version', async () => {
  await run(['projects', 'create', 'views', '--prefix', 'VW']);
  await run([
    'sessions',
    'register',
    '--session',
    'h1',
    '--actor',
    'hana',
    '--harness',
    'claude',
    '--machine',
    'mac-2',
    '--project',
    'views',
    '--model',
    'claude-haiku-4-5',
  ]);
  const transcript = join(dir, 'h1.jsonl');
  writeLines(transcript, [
    claudeAssistant(
      'h1-1',
      {
        input: 1_000_000,
        cacheRead: 1_000_000,
        cacheCreate: 2_000_000,
        write5m: 1_000_000,
        write1h: 1_000_000,
        output: 1_000_000,
        thinking: 200_000,
      },
      { model: 'claude-haiku-4-5-20251001' },
    ),
  ]);
  expect((await run(['hooks', 'usage', '--session', 'h1', '--harness', 'claude', '--artifact', transcript])).code).toBe(
    0,
  );
  const [row] = json<Record<string, unknown>[]>(await run(['sessions', 'list', '--json'])).filter(
    (r) => r.session_id === 'h1',
  );
  // Haiku 4.5: $1 input, $0.10 cache read, $1.25 5-minute and $2 1-hour cache writes, $5 output per MTok
  expect(row).toMatchObject({ usage_cost_usd: 9.35, usage_cost_status: 'priced' });
  const again = json<Record<string, unknown>>(await run(['pricing', 'import', '--genai-prices', '--json']));
  expect(again).toMatchObject({ revision_id: 'genai-prices-0.1.8', imported: false, shipped: true });
  const neither = await run(['pricing', 'import']);
  expect(neither.code).toBe(2);
  expect(neither.stderr).toMatch(/^pricing_source_required: /);

  // yoke sessions show: identity, per-model buckets, cost per bucket with the revision used
  const show = json<Record<string, any>>(await run(['sessions', 'show', 'h1', '--json']));
  expect(show).toMatchObject({
    session_id: 'h1',
    status: 'live',
    identity: { requested: { model: 'claude-haiku-4-5' }, served: { model: null } },
    usage: { status: 'measured', tokens: 5_000_000 },
    cost: { usd: 9.35, status: 'priced', revision_id: 'genai-prices-0.1.8' },
  });
  const haiku = show.usage.models[0];
  expect(haiku).toMatchObject({
    model: 'claude-haiku-4-5-20251001',
    rate_key: 'claude-haiku-4-5',
    reasoning_tokens: 200_000,
  });
  expect(haiku.buckets).toMatchObject({
    input: { tokens: 1_000_000, rate_per_mtok: 1, usd: 1 },
    cached_input: { tokens: 1_000_000, rate_per_mtok: 0.1, usd: 0.1 },
    cache_write: { tokens: 1_000_000, rate_per_mtok: 1.25, usd: 1.25 },
    cache_write_long: { tokens: 1_000_000, rate_per_mtok: 2, usd: 2 },
    output: { tokens: 1_000_000, rate_per_mtok: 5, usd: 5 },
  });
  const human = await run(['sessions', 'show', 'h1']);
  expect(human.stdout).toContain('cache_write_long');
  const missing = await run(['sessions', 'show', 'nobody']);
  expect(missing.code).toBe(1);
  expect(missing.stderr).toMatch(/^session_not_found: /);

  // yoke usage report: per model, per project; U13: a viewer without a grant on views does not see h1
  const byModel = json<{ rows: { key: string; cost_usd: number; sessions: number }[] }>(
    await run(['usage', 'report', '--by', 'model', '--json']),
  );
  expect(byModel.rows.find((r) => r.key === 'claude-haiku-4-5-20251001')).toMatchObject({
    cost_usd: 9.35,
    sessions: 1,
  });
  const byProject = json<{ rows: { key: string }[] }>(await run(['usage', 'report', '--by', 'project', '--json']));
  expect(byProject.rows.map((r) => r.key)).toContain('views');
  await run(['sessions', 'register', '--session', 'outsider', '--actor', 'omar', '--project', 'views']);
  await run(['sessions', 'register', '--session', 'stranger', '--actor', 'sam']);
  const hidden = json<{ rows: { key: string }[] }>(
    await run(['usage', 'report', '--by', 'session', '--json', '--session', 'stranger']),
  );
  expect(hidden.rows.map((r) => r.key)).not.toContain('h1');
  expect(
    json<{ rows: { key: string }[] }>(await run(['usage', 'report', '--by', 'session', '--json'])).rows.map(
      (r) => r.key,
    ),
  ).toContain('h1');
  const today = new Date().toISOString().slice(0, 10);
  const byDay = json<{ rows: { key: string }[] }>(
    await run(['usage', 'report', '--by', 'day', '--since', today, '--until', today, '--json']),
  );
  expect(byDay.rows.map((r) => r.key)).toEqual([today]);
  const before = json<{ rows: unknown[] }>(
    await run(['usage', 'report', '--by', 'day', '--until', '2020-01-01', '--json']),
  );
  expect(before.rows).toEqual([]);
  const bad = await run(['usage', 'report', '--by', 'day', '--since', '2026-13-45']);
  expect(bad.code).toBe(2);
  expect(bad.stderr).toMatch(/^invalid_date: --since/);
  const badKey = await run(['usage', 'report', '--by', 'week']);
  expect(badKey.code).toBe(2);
});

test('U4 a database that accepts and never answers costs the prompt one bounded wait: the line is printed, the facts recorded', async () => {
  const { createServer } = await import('node:net');
  const silent = createServer(() => undefined); // accepts, reads the startup packet, says nothing
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const port = (silent.address() as { port: number }).port;
  const home = fixtureDir();
  try {
    const r = await withStdin(
      ['hooks', 'status-line'],
      JSON.stringify({ session_id: 'u4-silent', model: { id: 'claude-opus-4-6', display_name: 'Opus 4.6' } }),
      { YOKE_HOME: home, DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/yoke` },
    );
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe('Opus 4.6 · served facts pending');
    const pending = JSON.parse(readFileSync(join(home, 'pending-attestations', 'u4-silent.json'), 'utf8'));
    expect(pending).toMatchObject({ model: 'claude-opus-4-6', attempts: 1 });
    expect(pending.error).toMatch(/did not answer within \d+ ms/);
  } finally {
    silent.close();
  }
});

test("U4 issue 13 a status-line write Postgres refuses (another actor's session) is not kept for a retry, and facts kept under one role are never written by another role's hook", async () => {
  const [alice, bob] = [await actors.add('alice_u4'), await actors.add('bob_u4')];
  const home = fixtureDir();
  expect((await alice.run(['sessions', 'register', '--session', 'u4-own', '--harness', 'claude'])).code).toBe(0);
  const served = () =>
    t.db
      .selectFrom('sessions')
      .select(['served_model', 'served_window'])
      .where('session_id', '=', 'u4-own')
      .executeTakeFirstOrThrow();
  const file = join(home, 'pending-attestations', 'u4-own.json');
  const forged = await withStdin(
    ['hooks', 'status-line'],
    JSON.stringify({ session_id: 'u4-own', model: { id: 'claude-evil' }, context_window: { context_window_size: 5 } }),
    { DATABASE_URL: bob.url, YOKE_HOME: home },
  );
  expect(forged.code).toBe(0);
  expect(forged.stdout).toContain('served facts refused');
  expect(forged.stdout).not.toContain('pending');
  expect(existsSync(file)).toBe(false);
  // a record Bob's hook kept while Postgres was away (written here as the hook writes it) is his
  mkdirSync(join(home, 'pending-attestations'), { recursive: true });
  writeFileSync(
    file,
    JSON.stringify({
      session_id: 'u4-own',
      model: 'claude-evil',
      window: 5,
      failed_at: new Date().toISOString(),
      error: 'connect ECONNREFUSED',
      attempts: 1,
      role: bob.name,
    }),
  );
  const own = await withStdin(
    ['hooks', 'status-line'],
    JSON.stringify({ session_id: 'u4-own', model: { id: 'claude-sonnet-4-5' } }),
    { DATABASE_URL: alice.url, YOKE_HOME: home },
  );
  expect(own.stdout).not.toContain('pending');
  expect(await served()).toEqual({ served_model: 'claude-sonnet-4-5', served_window: null });
  // a record naming no role (as older builds wrote them) is no one's to replay either
  const { role: _bobs, ...roleless } = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  writeFileSync(file, JSON.stringify({ ...roleless, model: 'claude-evil', window: 5 }));
  await withStdin(['hooks', 'status-line'], JSON.stringify({ session_id: 'u4-own' }), {
    DATABASE_URL: alice.url,
    YOKE_HOME: home,
  });
  expect(await served()).toEqual({ served_model: 'claude-sonnet-4-5', served_window: null });
});

test('U2 U3 issue 9 the status line takes any JSON without failing the prompt: null, a list or a string states nothing; a window past the column (2^31-1) or counts sent as strings are shown, never stored or added', async () => {
  const home = fixtureDir();
  await run(['sessions', 'register', '--session', 'u3-odd', '--actor', 'alice', '--harness', 'claude']);
  for (const payload of ['null', '[]', '"text"', '42']) {
    const r = await withStdin(['hooks', 'status-line'], payload, { YOKE_HOME: home, YOKE_SESSION_ID: 'u3-odd' });
    expect({ payload, code: r.code, out: r.stdout.trim(), err: r.stderr }).toEqual({
      payload,
      code: 0,
      out: 'model ?',
      err: '',
    });
  }
  const huge = await withStdin(
    ['hooks', 'status-line'],
    JSON.stringify({
      session_id: 'u3-odd',
      model: { id: 'claude-opus-4-5' },
      context_window: { context_window_size: 99_999_999_999, total_input_tokens: '1200', total_output_tokens: 34 },
    }),
    { YOKE_HOME: home },
  );
  expect(huge.code).toBe(0);
  expect(huge.stdout.trim()).toBe('claude-opus-4-5 · 34 tokens');
  expect(existsSync(join(home, 'pending-attestations', 'u3-odd.json'))).toBe(false);
  const row = await t.db
    .selectFrom('sessions')
    .select(['served_model', 'served_window'])
    .where('session_id', '=', 'u3-odd')
    .executeTakeFirstOrThrow();
  expect(row).toEqual({ served_model: 'claude-opus-4-5', served_window: null });
  // typed by a person, the same window is bad input naming the option (exit 2), nothing written
  for (const args of [
    ['sessions', 'register', '--session', 'u3-odd2', '--window', '99999999999'],
    ['hooks', 'served-model', '--session', 'u3-odd', '--model', 'claude-opus-4-5', '--window', '99999999999'],
  ]) {
    const refused = await run([...args, '--json']);
    expect({ args, code: refused.code }).toEqual({ args, code: 2 });
    expect(jsonError(refused).message).toContain('--window');
    expect(jsonError(refused).message).toContain('2147483647');
  }
  expect(
    await t.db.selectFrom('sessions').select('session_id').where('session_id', '=', 'u3-odd2').executeTakeFirst(),
  ).toBeUndefined();
});

test('U12 pricing import refuses a rate bucket it does not know (a misspelt `outptu` would leave output unpriced in a revision that never changes), naming the model and the key', async () => {
  const file = join(fixtureDir(), 'typo.json');
  writeFileSync(
    file,
    JSON.stringify({
      revision_id: 'typo-rev',
      effective_at: '2099-01-01T00:00:00Z',
      source: 'test',
      rates: { 'claude-sonnet-4-5': { input: 3, outptu: 15, cached_input: 0.3 } },
    }),
  );
  const r = await run(['pricing', 'import', file, '--json']);
  expect(r.code).toBe(2);
  expect(jsonError(r)).toMatchObject({ code: 'invalid_pricing_file' });
  expect(jsonError(r).message).toContain('rates.claude-sonnet-4-5');
  expect(jsonError(r).message).toContain('outptu');
  const stored = await t.db
    .selectFrom('pricing_revisions')
    .select('revision_id')
    .where('revision_id', '=', 'typo-rev')
    .executeTakeFirst();
  expect(stored).toBeUndefined();
});
