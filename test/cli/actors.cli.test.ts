import { Client } from 'pg';
import { actorFactory, type TestActor } from '../helpers/actors';
import { json, jsonError, setUp, yoke } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

let t: TestDatabase;
const actors = actorFactory(() => t.url);
const asAdmin = (args: string[], env: Record<string, string> = {}) => yoke(t.url, args, env);
let alice: TestActor;
let bob: TestActor;
let admin: TestActor;

beforeAll(async () => {
  t = await createTestDatabase();
  alice = await actors.add('alice');
  bob = await actors.add('bob', 'agent');
  admin = await actors.add('boss', 'admin');
  await setUp(asAdmin, [['projects', 'create', 'web', '--prefix', 'WEB']]);
});
afterAll(async () => {
  await actors.removeAll();
  await t.drop();
});

test('I13 actors add prints a connection string that connects as that role; list names each kind', async () => {
  const c = new Client({ connectionString: alice.url });
  await c.connect();
  try {
    const { rows } = await c.query<{ who: string; su: boolean }>(
      'SELECT session_user AS who, (SELECT rolsuper FROM pg_roles WHERE rolname = session_user) AS su',
    );
    expect(rows[0]).toEqual({ who: alice.name, su: false });
  } finally {
    await c.end();
  }
  const list = json<{ actor: string; kind: string }[]>(await asAdmin(['actors', 'list', '--json']));
  expect(list).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ actor: alice.name, kind: 'user' }),
      expect.objectContaining({ actor: bob.name, kind: 'agent' }),
      expect.objectContaining({ actor: admin.name, kind: 'admin' }),
    ]),
  );
  expect(json(await alice.run(['actors', 'whoami', '--json']))).toEqual({
    actor: alice.name,
    admin: false,
    kind: 'user',
  });
  expect(json(await bob.run(['actors', 'whoami', '--json']))).toEqual({ actor: bob.name, admin: false, kind: 'agent' });
  expect(json(await admin.run(['actors', 'whoami', '--json']))).toEqual({
    actor: admin.name,
    admin: true,
    kind: 'admin',
  });
});

test('I13 only an admin adds or removes actors; a bad name is a usage error', async () => {
  const r = await alice.run(['actors', 'add', `mallory_${process.pid}`, '--admin', '--json']);
  expect(r.code).toBe(1);
  expect(jsonError(r).code).toBe('permission_denied');
  const rm = await alice.run(['actors', 'remove', bob.name, '--json']);
  expect(rm.code).toBe(1);
  expect(jsonError(rm).code).toBe('permission_denied');
  const bad = await asAdmin(['actors', 'add', 'Bad Name', '--json']);
  expect(bad.code).toBe(2);
  expect(jsonError(bad).code).toBe('invalid_actor_name');
  const dup = await asAdmin(['actors', 'add', alice.name, '--json']);
  expect(dup.code).toBe(1);
  expect(jsonError(dup).code).toBe('actor_exists');
  // a role yoke did not add is never removed by yoke, so its recovery is another name, not removal
  const group = jsonError(await asAdmin(['actors', 'add', 'yoke_admin', '--json']));
  expect(group.code).toBe('actor_exists');
  expect(group.recovery).toContain('choose another name');
  expect(group.recovery).not.toContain('actors remove');
  // an admin cannot remove the actor it is connected as: named, not internal_error
  const self = await admin.run(['actors', 'remove', admin.name, '--json']);
  expect(self.code).toBe(1);
  expect(jsonError(self)).toMatchObject({ code: 'actor_in_use', details: { actor: admin.name, removed: false } });
  // An admin actor (not a superuser) manages actors through the same path.
  const carol = await admin.run(['actors', 'add', `carol_${process.pid}`, '--json']);
  expect(carol.code).toBe(0);
  const gone = json(await admin.run(['actors', 'remove', `carol_${process.pid}`, '--json']));
  expect(gone).toEqual({ actor: `carol_${process.pid}`, removed: true });
  expect((await asAdmin(['actors', 'remove', 'postgres', '--json'])).code).toBe(1);
});

test('I13 actors remove of a name nobody added refuses actor_not_found naming it (exit 1), not removed:false', async () => {
  const name = `nosuch_${process.pid}`;
  const r = await asAdmin(['actors', 'remove', name, '--json']);
  expect(r.code).toBe(1);
  expect(r.stdout).toBe('');
  expect(jsonError(r)).toMatchObject({ code: 'actor_not_found', details: { actor: name, removed: false } });
  expect(jsonError(r).message).toContain(name);
  expect(jsonError(r).recovery).toContain('yoke actors list');
  const text = await asAdmin(['actors', 'remove', name]);
  expect(text.code).toBe(1);
  expect(text.stderr).toContain(`actor_not_found: no actor is named ${name}`);
});

test('I13 the recorded actor is the connected role: impersonating registration is refused, nothing written', async () => {
  const r = await alice.run(['sessions', 'register', '--session', 'imp', '--actor', bob.name, '--json']);
  expect(r.code).toBe(1);
  expect(jsonError(r).code).toBe('permission_denied');
  expect(jsonError(r).message).toContain(alice.name);
  const none = await t.db.selectFrom('sessions').select('session_id').where('session_id', '=', 'imp').execute();
  expect(none).toEqual([]);

  const own = json(await alice.run(['sessions', 'register', '--session', 'a1', '--project', 'web', '--json']));
  expect(own).toMatchObject({ session_id: 'a1', actor_id: alice.name, registered_by: alice.name });
  const same = await alice.run(['sessions', 'register', '--session', 'a2', '--actor', alice.name, '--json']);
  expect(same.code).toBe(0);
});

test('I13 an admin may register a session for another actor, recorded as registered by that admin', async () => {
  const r = json(await admin.run(['sessions', 'register', '--session', 'b1', '--actor', bob.name, '--json']));
  expect(r).toMatchObject({ session_id: 'b1', actor_id: bob.name, registered_by: admin.name });
  // The superuser of the single-user default is an admin: README commands keep working.
  const su = json(await asAdmin(['sessions', 'register', '--session', 'o1', '--actor', 'ops', '--json']));
  expect(su).toMatchObject({ actor_id: 'ops', registered_by: 'postgres' });
});

test('I13 events record the connected role and are append-only, even for an admin', async () => {
  const c = new Client({ connectionString: admin.url });
  await c.connect();
  try {
    const { rows } = await c.query<{ actor_id: string }>(
      "INSERT INTO events (event_type, payload) VALUES ('Probe', '{}') RETURNING actor_id",
    );
    expect(rows[0]!.actor_id).toBe(admin.name);
    await expect(c.query("UPDATE events SET event_type = 'Forged'")).rejects.toMatchObject({ code: '42501' });
    await expect(c.query('DELETE FROM events')).rejects.toMatchObject({ code: '42501' });
  } finally {
    await c.end();
  }
  const su = new Client({ connectionString: t.url });
  await su.connect();
  try {
    await expect(su.query("UPDATE events SET event_type = 'Forged'")).rejects.toMatchObject({
      code: 'YK001',
      detail: 'permission_denied',
    });
  } finally {
    await su.end();
  }
});

test('I13 issue 13: a user refused an admin-only command is given a recovery that works, never "actors add NAME --admin" for its own name (actor_exists)', async () => {
  const machine = 'lab-x --host 127.0.0.1 --port 22 --user qa --credential k'.split(' ');
  const r = await alice.run(['test-machine', 'add', ...machine, '--json']);
  expect(r.code).toBe(1);
  const { code, recovery } = jsonError(r);
  expect(code).toBe('permission_denied');
  expect(recovery).not.toContain('make you one');
  expect(recovery).toContain('yoke actors list');
  // the hint as given: the user can see who the admins are
  const list = json<{ actor: string; kind: string }[]>(await alice.run(['actors', 'list', '--json']));
  expect(list).toEqual(expect.arrayContaining([expect.objectContaining({ actor: admin.name, kind: 'admin' })]));
  // every admin-only command says so the same way, never a table's or function's bare permission error
  for (const args of [
    ['actors', 'add', `dave_${process.pid}`],
    ['actors', 'remove', bob.name],
    ['projects', 'create', `p${process.pid}`],
    ['projects', 'grant', 'web', '--actor', bob.name, '--permission', 'claims.release'],
  ]) {
    const refused = jsonError(await alice.run([...args, '--json']));
    expect(refused.code).toBe('permission_denied');
    expect(refused.message).toContain(`${alice.name} is not an admin`);
  }
});

test('I13 a login Postgres refuses (a role nobody added, or removed) is postgres_login_refused naming the role, not postgres_unreachable', async () => {
  const url = new URL(t.url);
  url.username = `gone_${process.pid}`;
  url.password = 'x';
  const r = await yoke(url.toString(), ['actors', 'whoami', '--json']);
  expect(r.code).toBe(3);
  expect(jsonError(r)).toMatchObject({ code: 'postgres_login_refused', details: { role: `gone_${process.pid}` } });
  expect(jsonError(r).recovery).toContain('yoke actors add');
});

test('I13 a name Postgres reserves for roles is invalid_actor_name (exit 2), not internal_error', async () => {
  for (const name of ['pg_audit', 'public', 'none', 'current_user', 'session_user']) {
    const r = await asAdmin(['actors', 'add', name, '--json']);
    expect(r.code).toBe(2);
    expect(jsonError(r)).toMatchObject({ code: 'invalid_actor_name', details: { actor: name } });
  }
});
