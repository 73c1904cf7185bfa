import { join } from 'node:path';
import { actorFactory, type TestActor } from '../helpers/actors';
import { json, jsonError, setUp, yoke, type CliResult } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { refusalOf, sqlActors } from '../helpers/roles';
import { claudeAssistant, fixtureDir, writeLines } from '../helpers/usageFixtures';

/**
 * What a session is (its start, project, machine, harness, probe mark and end) is recorded
 * once: a re-registration fills in what was left out and replaces only the request (U2), and a
 * user's own raw UPDATE cannot move it either (issue 13). A backfill registers its sessions
 * for the connected role (issue 13, issue 16).
 */
let t: TestDatabase;
const actors = actorFactory(() => t.url);
const raw = sqlActors(() => t.url);
const asAdmin = (args: string[]) => yoke(t.url, args);
let alice: TestActor;

beforeAll(async () => {
  t = await createTestDatabase();
  await setUp(asAdmin, [
    ['projects', 'create', 'web'],
    ['projects', 'create', 'docs'],
  ]);
  alice = await actors.add('alice');
}, 60_000);

afterAll(async () => {
  await raw.end();
  await actors.removeAll();
  await t.drop();
});

const sessionRow = (id: string) =>
  t.db
    .selectFrom('sessions')
    .select(['project_id', 'machine_id', 'harness', 'offered_at', 'probe'])
    .where('session_id', '=', id)
    .executeTakeFirstOrThrow();

test('U13 U2 re-registering a live session with another --project, --machine or --harness is refused session_identity_conflict and changes nothing; one left out at registration is filled in', async () => {
  const as = (args: string[]) => alice.run([...args, '--json']);
  expect((await as(['sessions', 'register', '--session', 'id1', '--project', 'web', '--machine', 'm1'])).code).toBe(0);
  const before = await sessionRow('id1');
  // the harness was left out (recorded as `other`): naming it fills it in
  expect(json(await as(['sessions', 'register', '--session', 'id1', '--harness', 'claude']))).toMatchObject({
    harness: 'claude',
  });
  for (const [flag, value] of [
    ['--project', 'docs'],
    ['--machine', 'm9'],
    ['--harness', 'codex'],
  ] as const) {
    const r = await as(['sessions', 'register', '--session', 'id1', flag, value]);
    expect({ flag, code: r.code }).toEqual({ flag, code: 1 });
    expect(jsonError(r)).toMatchObject({ code: 'session_identity_conflict' });
    expect(jsonError(r).message).toContain(`${flag} ${value}`);
    expect(jsonError(r).recovery).toContain(`without ${flag}`);
  }
  expect(await sessionRow('id1')).toEqual({ ...before, harness: 'claude' });
  // naming what is recorded is no change
  const same = await as(['sessions', 'register', '--session', 'id1', '--project', 'web', '--machine', 'm1']);
  expect(same.code).toBe(0);
  // a session registered without a machine takes one later
  expect((await as(['sessions', 'register', '--session', 'id2'])).code).toBe(0);
  expect(json(await as(['sessions', 'register', '--session', 'id2', '--machine', 'm2']))).toMatchObject({
    machine_id: 'm2',
  });
});

test("U12 U13 issue 13 a user's raw UPDATE of its own session cannot move its start (the pricing revision), project, machine or harness, or drop its probe mark; a heartbeat and an end still work", async () => {
  const bob = await raw.add('bob');
  const registered = await asAdmin([
    ...['sessions', 'register', '--session', 'raw1', '--actor', bob.name],
    ...['--project', 'web', '--machine', 'm1', '--harness', 'claude', '--probe'],
  ]);
  expect(registered.code).toBe(0);
  for (const change of [
    "offered_at = '2099-06-01'",
    "project_id = (SELECT project_id FROM projects WHERE name = 'docs')",
    'project_id = NULL',
    "machine_id = 'm9'",
    "harness = 'codex'",
    'probe = false',
  ]) {
    expect({
      change,
      refusal: await refusalOf(bob.q(`UPDATE sessions SET ${change} WHERE session_id = 'raw1'`)),
    }).toEqual({ change, refusal: 'permission_denied' });
  }
  // an admin still may
  await t.db.updateTable('sessions').set({ probe: false }).where('session_id', '=', 'raw1').execute();
  expect((await sessionRow('raw1')).probe).toBe(false);
  // what a user's hooks do to its own session still goes through, its end included, and an
  // ended session takes no change at all
  await bob.q("UPDATE sessions SET heartbeat_at = now(), served_model = 'claude-sonnet-4-5' WHERE session_id = 'raw1'");
  await bob.q("UPDATE sessions SET ended_at = now(), end_reason = 'done' WHERE session_id = 'raw1'");
  expect(await refusalOf(bob.q("UPDATE sessions SET ended_at = NULL WHERE session_id = 'raw1'"))).toBe('session_ended');
});

test('issue 13 issue 16 usage backfill run by a user registers its sessions for that user; an admin names the actor with --actor (default: the local user)', async () => {
  const config = fixtureDir();
  const project = join(config, 'projects', '-work-app');
  const backfill = (run: (args: string[]) => Promise<CliResult>, extra: string[] = []) =>
    run(['usage', 'backfill', '--harness', 'claude', '--dir', config, ...extra, '--json']);
  const done = (r: CliResult) => JSON.parse(r.stdout.trim().split('\n').pop()!);
  writeLines(join(project, 'bf-user.jsonl'), [claudeAssistant('u1', { input: 10, output: 2 })]);
  const mine = await backfill((args) => alice.run(args));
  expect(mine.code).toBe(0);
  expect(done(mine)).toMatchObject({ event: 'done', actor_id: alice.name, registered: 1 });
  writeLines(join(project, 'bf-admin.jsonl'), [claudeAssistant('a1', { input: 10, output: 2 })]);
  expect(done(await backfill(asAdmin, ['--actor', 'carol']))).toMatchObject({ actor_id: 'carol', registered: 1 });
  const owners = await t.db
    .selectFrom('sessions')
    .select(['session_id', 'actor_id'])
    .where('session_id', 'in', ['bf-user', 'bf-admin'])
    .orderBy('session_id')
    .execute();
  expect(owners).toEqual([
    { session_id: 'bf-admin', actor_id: 'carol' },
    { session_id: 'bf-user', actor_id: alice.name },
  ]);
  // a user naming another actor is refused as sessions register refuses it
  writeLines(join(project, 'bf-other.jsonl'), [claudeAssistant('o1', { input: 1, output: 1 })]);
  const other = await backfill((args) => alice.run(args), ['--actor', 'carol']);
  expect(other.code).toBe(1);
  expect(jsonError(other).code).toBe('permission_denied');
  // a transcript named like another actor's session is named as such, not folded into it
  const again = await backfill((args) => alice.run(args));
  const lines = again.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines).toContainEqual(
    expect.objectContaining({
      session_id: 'bf-admin',
      status: 'failed',
      error: expect.stringContaining(`registered to actor carol, not ${alice.name}`),
    }),
  );
  expect(lines.find((l) => l.session_id === 'bf-admin')!.error).not.toContain('row-level security');
});
