import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { readCredential } from '../../activities/hosts/ssh';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

/**
 * Issue 13: SSH credentials belong to the worker. A credential names a key in the worker's key
 * directory; the worker opens nothing else, whatever a stored name tries.
 */
const keyDir = mkdtempSync(join(tmpdir(), 'yoke-keydir-'));
const elsewhere = mkdtempSync(join(tmpdir(), 'yoke-other-user-'));
execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keyDir, 'lab-1')]);
execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(elsewhere, 'id_ed25519')]);
symlinkSync(join(elsewhere, 'id_ed25519'), join(keyDir, 'borrowed'));
writeFileSync(join(keyDir, 'notes'), 'not a key\n');

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t.drop();
});

const code = (f: () => unknown): string => {
  try {
    f();
    return 'read';
  } catch (err) {
    return (err as { code: string }).code;
  }
};

test('I13 a credential reads only a key file inside the key directory', () => {
  expect(readCredential('lab-1', keyDir).length).toBeGreaterThan(0);
  for (const attack of [
    join(elsewhere, 'id_ed25519'), // absolute path
    `../${elsewhere.split('/').pop()}/id_ed25519`, // traversal
    '..',
    'borrowed', // a link out of the directory
    'missing',
    'notes', // not a key
    'lab-1.pub', // W3: a public key parses, but no login can be signed with it
  ])
    expect([attack, code(() => readCredential(attack, keyDir))]).toEqual([attack, 'credential_unknown']);
});

test('I13 the database stores credential names only: a path is refused even for an admin', async () => {
  for (const table of ['test_machines', 'deploy_hosts'] as const) {
    const column = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = ${table} AND column_name = 'identity_file'`.execute(
      t.db,
    );
    expect(column.rows[0]!.n).toBe(0);
  }
  const insert = (credential: string) =>
    sql`INSERT INTO test_machines (name, host, port, ssh_user, credential, host_key, host_key_fingerprint, host_key_source,
                                   verify_command, capture_command)
        VALUES ('lab-x', '127.0.0.1', 22, 'qa', ${credential}, 'ssh-ed25519 AAAA', 'SHA256:x', 'host_key_file', 'true', 'true')`.execute(
      t.db,
    );
  for (const credential of ['/home/other/.ssh/id_ed25519', '../other/.ssh/id_ed25519', '.ssh'])
    await expect(insert(credential)).rejects.toMatchObject({ code: '23514' });
  await insert('lab-1');
});

test('issue 10 apply warns of a deploy host whose credential the worker has no key for, and applies the definition', async () => {
  const { projectDefinitionActivities } = await import('../../activities/projectDefinition');
  const dir = mkdtempSync(join(tmpdir(), 'yoke-def-'));
  writeFileSync(join(dir, 'app.pub'), `${readFileSync(join(keyDir, 'lab-1.pub'), 'utf8')}`);
  const file = join(dir, 'p.yaml');
  writeFileSync(
    file,
    [
      'project: creds',
      'environments:',
      '  - { name: stage, url: "http://127.0.0.1:9", tier: stage }',
      'hosts:',
      '  - { name: app, host: 127.0.0.1, port: 22, user: deploy, credential: lab-1, host_key_file: app.pub }',
      '  - { name: db, host: 127.0.0.1, port: 22, user: deploy, credential: nokey, host_key_file: app.pub }',
    ].join('\n'),
  );
  const r = await projectDefinitionActivities({ db: t.db, keyDir }).applyProjectDefinition({ file });
  expect(r.summary.create).toBeGreaterThan(0);
  expect(r.warnings).toEqual([expect.stringMatching(/^host db: .*nokey.*credential_unknown/)]);
});
