import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { chromium, type Browser, type Page } from 'playwright-core';
import { boardActivities } from '../../activities/board';
import { claimPrimitiveActivities } from '../../activities/claimPrimitives';
import { deploymentRunActivities } from '../../activities/deploymentRuns';
import { projectDefinitionActivities } from '../../activities/projectDefinition';
import { sessionUsageActivities } from '../../activities/usage/sessionUsage';
import { totalTokens, type UsageTotals } from '../../domain/usage/buckets';
import { projectRoot } from '../../config/paths';
import { chromiumPath } from '../helpers/chromium';
import { yokeBin } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { services, type Services } from '../helpers/fixtures';
import { releaseDefinition, writeDefinition } from '../helpers/runs';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';

const UI = 'http://127.0.0.1:8233';
const ARTIFACTS = join(projectRoot(__dirname), 'test-artifacts');

let t: TestDatabase;
let s: Services;
let server: ChildProcess;
let url: string;
let browser: Browser;
let page: Page;
let runId: string;
const requests: string[] = [];
let navigations = 0;

/** `yoke serve` from the built binary, the way an operator starts it; resolves with its address. */
function startServe(databaseUrl: string): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [yokeBin, 'serve', '--port', '0', '--poll-ms', '300', '--json'], {
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: databaseUrl,
        YOKE_HOME: mkdtempSync(join(tmpdir(), 'yoke-serve-')),
        YOKE_TEMPORAL_UI_URL: UI,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout!.on('data', (d) => {
      out += String(d);
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve({ child, url: (JSON.parse(line) as { url: string }).url });
    });
    child.stderr!.on('data', (d) => (err += String(d)));
    child.on('exit', (code) => reject(new Error(`yoke serve exited ${code}: ${err}`)));
  });
}

async function seed() {
  s = services(t.db);
  const p = claimPrimitiveActivities({ db: t.db });
  await s.createProject({ name: 'web', itemPrefix: 'WEB' });
  await s.registerSession({ sessionId: 'op', actorId: 'ops', project: 'web', machine: 'mac-1' });
  await s.takeSteeringSeat({ sessionId: 'op', project: 'web' });
  await p.lockDocument({ sessionId: 'op', document: 'MISSION', project: 'web' });
  await s.registerSession({ sessionId: 'w1', actorId: 'alice', project: 'web', machine: 'mac-1', harness: 'claude' });
  await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
  await p.takePaths({ sessionId: 'w1', paths: ['src/a.ts', 'src/b.ts'], item: 'WEB-1' });
  await s.registerSession({ sessionId: 'w2', actorId: 'bob', project: 'web', machine: 'mac-2', harness: 'claude' });

  // A test machine held by w1 with w2 in its waiting line.
  const keys = mkdtempSync(join(tmpdir(), 'yoke-e2e-keys-'));
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keys, 'host_key')]);
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keys, 'client_key')]);
  await s.addTestMachine({
    name: 'lab-1',
    host: '127.0.0.1',
    port: 22,
    user: 'qa',
    credential: 'lab-1',
    hostKeyFile: join(keys, 'host_key.pub'),
  });
  await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
  await s
    .acquireCoordinationClaim({
      sessionId: 'w2',
      key: 'QA_HOST:lab-1',
      join: { resumeCommand: 'yoke claims coordination-claim acquire --key QA_HOST:lab-1' },
    })
    .catch(() => undefined); // refused: it joins the line

  // A deployment run driven by d1, executing.
  await projectDefinitionActivities({ db: t.db }).applyProjectDefinition({
    file: writeDefinition(
      releaseDefinition({
        project: 'shop',
        prefix: 'SHOP',
        stageUrl: 'http://stage.shop.test',
        prodUrl: 'https://shop.test',
      }),
    ),
  });
  await s.registerSession({ sessionId: 'd1', actorId: 'dana', project: 'shop', machine: 'mac-2' });
  const runs = deploymentRunActivities({ db: t.db });
  const run = await runs.createRun({
    sessionId: 'd1',
    project: 'shop',
    flow: 'release',
    target: 'stage',
    candidate: 'abc1234def',
    idempotencyKey: 'e2e',
    items: ['SHOP-1'],
  });
  await runs.executeRun({ sessionId: 'd1', runId: run.run_id });
  await runs.beginStage({ runId: run.run_id, ordinal: 0, walk: 1 }); // the first execute starts walk 1
  runId = run.run_id;

  // Measured usage on mac-2.
  const transcript = join(fixtureDir(), 'w2.jsonl');
  writeLines(transcript, [
    claudeAssistant('m1', { input: 12_000, output: 3_000 }),
    claudeAssistant('m2', { input: 500, output: 70 }),
  ]);
  await sessionUsageActivities({ db: t.db }).foldSessionUsage({
    sessionId: 'w2',
    harness: 'claude',
    artifacts: [transcript],
  });
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const executablePath = chromiumPath();
  t = await createTestDatabase();
  await seed();
  ({ child: server, url } = await startServe(t.url));
  browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-gpu'] });
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on('request', (r) => requests.push(new URL(r.url()).pathname));
  page.on('framenavigated', (f) => {
    if (f === page.mainFrame()) navigations++;
  });
  await page.goto(url);
  await page.waitForSelector('[data-session="w1"] kbd', { timeout: 60_000 });
}, 900_000);

afterAll(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
  await t?.drop();
});

const texts = (selector: string) => page.locator(selector).allTextContents();

/** Waits for a condition the page's polling brings about, on events rather than a fixed sleep. */
async function until(condition: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await page.waitForResponse(() => true, { timeout: timeoutMs });
  }
}

test('B1 the board panel shows each session with the Claims column the board read renders', async () => {
  const board = await boardActivities({ db: t.db }).board();
  for (const row of board.active_sessions)
    expect({
      session: row.session_id,
      claims: await texts(`#active-sessions [data-session="${row.session_id}"] kbd`),
    }).toEqual({
      session: row.session_id,
      claims: row.claims,
    });
  expect(await texts('#active-sessions [data-session="w1"] kbd')).toEqual(['WEB-1 📁2', '🔒 QA_HOST:lab-1']);
  expect(await texts('#active-sessions [data-session="op"] kbd')).toEqual(['🛞 steering web · MISSION']);
  await page.locator('#board').screenshot({ path: join(ARTIFACTS, 'dashboard-board.png') });
});

test('runs panel: stages, occupancy and QA as the database has them, linked to the Temporal Web UI', async () => {
  const card = page.locator(`[data-run="${runId}"]`);
  await card.waitFor();
  const run = await t.db
    .selectFrom('deployment_runs')
    .selectAll()
    .where('run_id', '=', runId)
    .executeTakeFirstOrThrow();
  expect(await card.locator('h3 .badge').textContent()).toBe(run.status);
  const stages = await t.db
    .selectFrom('deployment_run_stages')
    .select(['name', 'status'])
    .where('run_id', '=', runId)
    .orderBy('ordinal')
    .execute();
  expect(
    await card
      .locator('.stage')
      .evaluateAll((els) => els.map((e) => [e.getAttribute('data-stage'), e.querySelector('.badge')!.textContent])),
  ).toEqual(stages.map((st) => [st.name, st.status]));
  const units = await t.db.selectFrom('deployment_run_occupancy').select('unit').where('run_id', '=', runId).execute();
  const occupancy = await card.locator('.occupancy').textContent();
  for (const u of units) expect(occupancy).toContain(u.unit);
  const qa = await t.db
    .selectFrom('deployment_run_qa')
    .select(['check_name', 'status'])
    .where('run_id', '=', runId)
    .execute();
  for (const q of qa) expect(await card.locator(`[data-check="${q.check_name}"] .badge`).textContent()).toBe(q.status);
  expect(await card.locator('h3 a.workflow-link').getAttribute('href')).toBe(
    `${UI}/namespaces/default/workflows/${encodeURIComponent(`deployment-run/${runId}`)}`,
  );
  await page.locator('#runs').screenshot({ path: join(ARTIFACTS, 'dashboard-runs.png') });
});

test('S1 issue 12: a settling run reads settling on its runs-panel badge, as watch and get show it', async () => {
  const setSettling = (at: Date | null) =>
    t.db.updateTable('deployment_runs').set({ settling_at: at }).where('run_id', '=', runId).execute();
  await setSettling(new Date());
  try {
    const badge = page.locator(`[data-run="${runId}"] h3 .badge`);
    await badge.filter({ hasText: 'settling' }).waitFor({ timeout: 15_000 });
    expect(await badge.getAttribute('class')).toBe('badge settling');
  } finally {
    await setSettling(null);
  }
  await page.locator(`[data-run="${runId}"] h3 .badge`).filter({ hasText: 'executing' }).waitFor({ timeout: 15_000 });
});

test('W1 test machines panel: health, holder and waiting line as recorded, each wait linked to its workflow', async () => {
  const card = page.locator('[data-machine="lab-1"]');
  await card.waitFor();
  const holder = await t.db
    .selectFrom('work_claims')
    .select(['session_id', 'claim_id'])
    .where('target_kind', '=', 'qa_admission')
    .where('released_at', 'is', null)
    .executeTakeFirstOrThrow();
  expect(await card.locator('.holder').textContent()).toContain(`${holder.session_id} (claim ${holder.claim_id}`);
  const { rows } = await sql<{ unhealthy: boolean }>`SELECT test_machine_unhealthy('lab-1') AS unhealthy`.execute(t.db);
  expect(await card.locator('h3 .badge').textContent()).toBe(rows[0]!.unhealthy ? 'unhealthy' : 'healthy');
  const waits = await t.db
    .selectFrom('qa_test_machine_waits')
    .select('session_id')
    .where('state', '=', 'waiting')
    .orderBy('queued_at')
    .execute();
  expect(
    await card.locator('.line li').evaluateAll((els) => els.map((e) => e.getAttribute('data-wait-session'))),
  ).toEqual(waits.map((w) => w.session_id));
  expect(await card.locator('.line li a').first().getAttribute('href')).toBe(
    `${UI}/namespaces/default/workflows/${encodeURIComponent('test-machine-wait/lab-1/w2')}`,
  );
  await page.locator('#test-machines').screenshot({ path: join(ARTIFACTS, 'dashboard-test-machines.png') });
});

test('U13 machines panel: 24H cards match the database and are fetched once per panel load', async () => {
  const usage = await sessionUsageActivities({ db: t.db }).machinesUsage();
  const { rows } = await sql<{ machine_id: string; n: number }>`
    SELECT machine_id, count(*)::int AS n FROM sessions
     WHERE machine_id IS NOT NULL AND NOT probe AND offered_at >= now() - interval '24 hours' GROUP BY 1 ORDER BY 1`.execute(
    t.db,
  );
  expect(usage.map((u) => [u.machine_id, u['24H SESSIONS']])).toEqual(rows.map((r) => [r.machine_id, r.n]));
  const totals = await t.db
    .selectFrom('session_usage')
    .select('totals')
    .where('session_id', '=', 'w2')
    .executeTakeFirstOrThrow();
  const mac2 = usage.find((u) => u.machine_id === 'mac-2')!;
  expect(mac2['24H TOKENS']).toBe(15_570);
  expect(totalTokens(totals.totals as unknown as UsageTotals)).toBe(15_570); // what the fold stored
  for (const u of usage) {
    const card = page.locator(`[data-usage-machine="${u.machine_id}"]`);
    // U10: a machine none of whose sessions was measured reads "not measured", never 0.
    const tokens =
      u['24H TOKENS'] === null
        ? 'not measured'
        : u.measured_sessions < u['24H SESSIONS']
          ? `${u['24H TOKENS']} (${u.measured_sessions} of ${u['24H SESSIONS']} sessions measured)`
          : String(u['24H TOKENS']);
    expect(await card.locator('[data-figure="tokens"]').textContent()).toBe(tokens);
    expect(await card.locator('[data-figure="tokens"]').getAttribute('data-usage-status')).toBe(u.usage_status);
    expect(await card.locator('[data-figure="sessions"]').textContent()).toBe(String(u['24H SESSIONS']));
    expect(await card.locator('[data-figure="cost"]').textContent()).toContain(
      u['24H API COST'] === null ? '–' : `$${u['24H API COST'].toFixed(4)}`,
    );
  }
  expect(await texts('#usage-cards dt')).toEqual(
    expect.arrayContaining(['24H TOKENS', '24H API COST', '24H SESSIONS']),
  );
  // Other panels have polled several times since the page loaded; the usage cards have not.
  await until(() => requests.filter((r) => r === '/api/board').length > 2);
  expect(requests.filter((r) => r === '/api/machines/usage')).toHaveLength(1);
  await page.locator('#machines').screenshot({ path: join(ARTIFACTS, 'dashboard-machines.png') });
});

test('a claim taken now appears on the board without a reload', async () => {
  await page.evaluate(() => ((globalThis as unknown as { marker: string }).marker = 'same page'));
  await claimPrimitiveActivities({ db: t.db }).takeProcess({ sessionId: 'w2', processKey: 'FEED' });
  await page.waitForSelector('#active-sessions [data-session="w2"] kbd:text-is("⚙ FEED")', { timeout: 60_000 });
  expect(await page.evaluate(() => (globalThis as unknown as { marker?: string }).marker)).toBe('same page');
  expect(navigations).toBe(1);
  await page.screenshot({ path: join(ARTIFACTS, 'dashboard-live-claim.png'), fullPage: true });
});

test('W7 B1 a turn reserved for a waiter is drawn as a reservation, not a hold, and becomes a hold once taken', async () => {
  const held = await t.db
    .selectFrom('work_claims')
    .select('claim_id')
    .where('key', '=', 'QA_HOST:lab-1')
    .where('released_at', 'is', null)
    .executeTakeFirstOrThrow();
  await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: held.claim_id, reason: 'suite done' });
  const reserved = page.locator('#active-sessions [data-session="w2"] kbd.reserved');
  await reserved.waitFor({ timeout: 60_000 });
  expect(await reserved.textContent()).toMatch(/^⏳ QA_HOST:lab-1 reserved until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  expect(await texts('#active-sessions [data-session="w1"] kbd')).toEqual(['WEB-1 📁2']);
  await page.locator('#board').screenshot({ path: join(ARTIFACTS, 'dashboard-reserved-turn.png') });
  await s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1' });
  await page.waitForSelector('#active-sessions [data-session="w2"] kbd:text-is("🔒 QA_HOST:lab-1")', {
    timeout: 60_000,
  });
  expect(await page.locator('#active-sessions [data-session="w2"] kbd.reserved').count()).toBe(0);
});
