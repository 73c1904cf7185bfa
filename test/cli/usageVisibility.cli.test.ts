import { join } from 'node:path';
import { actorFactory, type TestActor } from '../helpers/actors';
import { json, jsonError, setUp, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';

let t: TestDatabase;
const actors = actorFactory(() => t.url);
const asAdmin = (args: string[]) => yoke(t.url, args);
let alice: TestActor;
let bob: TestActor;

beforeAll(async () => {
  t = await createTestDatabase();
  alice = await actors.add('alice');
  bob = await actors.add('bob', 'agent');
  await setUp(asAdmin, [
    ['projects', 'create', 'web', '--prefix', 'WEB'],
    ['projects', 'grant', 'web', '--actor', alice.name, '--permission', 'project.read'],
  ]);
  await setUp(alice.run, [['sessions', 'register', '--session', 'va1', '--project', 'web', '--machine', 'vm1']]);
  await setUp(bob.run, [['sessions', 'register', '--session', 'vb1', '--machine', 'vm2']]);
  const transcript = join(fixtureDir(), 'va1.jsonl');
  writeLines(transcript, [claudeAssistant('va1-1', { input: 2000, output: 100 })]);
  await setUp(alice.run, [['hooks', 'usage', '--session', 'va1', '--harness', 'claude', '--artifact', transcript]]);
});
afterAll(async () => {
  await actors.removeAll();
  await t.drop();
});

test('U13 issue 15: an actor without a grant on web reads none of its usage, with or without --session', async () => {
  // No viewing session (no --session, no YOKE_SESSION_ID): the connected role is the viewer.
  for (const viewer of [[], ['--session', 'vb1']]) {
    const machines = json<{ machine_id: string }[]>(await bob.run(['machines', 'usage', ...viewer, '--json']));
    expect({ viewer, machines: machines.map((m) => m.machine_id) }).toEqual({ viewer, machines: ['vm2'] });
    const cohort = json<{ session_id: string }[]>(
      await bob.run(['sessions', 'list', '--usage-last-24h', ...viewer, '--json']),
    );
    expect({ viewer, cohort: cohort.map((s) => s.session_id) }).toEqual({ viewer, cohort: ['vb1'] });
    const report = json<{ rows: { key: string }[] }>(
      await bob.run(['usage', 'report', '--by', 'session', ...viewer, '--json']),
    );
    expect(JSON.stringify(report)).not.toContain('va1');
    const show = await bob.run(['sessions', 'show', 'va1', ...viewer, '--json']);
    expect({ viewer, code: show.code, error: jsonError(show).code }).toEqual({
      viewer,
      code: 1,
      error: 'session_not_found',
    });
    // U13: listed in the roster, so the refusal says it is hidden, not that it does not exist
    expect(jsonError(show).message).toContain('is recorded, but its detail is not shown');
  }
  // The plain roster lists every session (U13 bounds the cohort, not the roster) but shows bob no usage of va1.
  const roster = json<{ session_id: string; usage_tokens: number | null; usage_status: string }[]>(
    await bob.run(['sessions', 'list', '--json']),
  );
  expect(roster.find((s) => s.session_id === 'va1')).toMatchObject({
    usage_tokens: null,
    usage_status: 'unavailable',
    // hidden, not missing: the note says why it is not shown, never that no source was found
    usage_note: "usage not shown: your actor has no grant on this session's project (U13)",
  });
  // the table says so too, not the "unavailable" of a session with no source
  const line = (await bob.run(['sessions', 'list'])).stdout.split('\n').find((l) => l.startsWith('va1 '))!;
  expect(line).toContain('not shown');
  expect(line).not.toContain('unavailable');
  // The grant holder and an admin still read it.
  for (const run of [alice.run, asAdmin]) {
    const listed = json<{ session_id: string; usage_tokens: number | null }[]>(
      await run(['sessions', 'list', '--json']),
    );
    expect(listed.find((s) => s.session_id === 'va1')?.usage_tokens).toBe(2100);
    const machines = json<{ machine_id: string; '24H TOKENS': number | null }[]>(
      await run(['machines', 'usage', '--json']),
    );
    expect(machines.find((m) => m.machine_id === 'vm1')?.['24H TOKENS']).toBe(2100);
  }
}, 120_000);
