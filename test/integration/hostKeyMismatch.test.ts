import { readFileSync } from 'node:fs';
import { readCredential, runOverSsh, type SshHostRole } from '../../activities/hosts/ssh';
import type { YokeError } from '../../domain/errors';
import { formatHostKey, parseHostKeyText } from '../../domain/hostKeys';
import { DEFAULT_SSH_TIMEOUTS } from '../../domain/timeouts';
import { startSshHost, type SshHost } from '../helpers/sshd';

/**
 * Issue 10: a changed host key is refused with the way to re-pin it, and that way depends on
 * what the host is: a test machine is re-pinned with `yoke test-machine repin`; a deploy host's key is
 * its `host_key_file` in the project definition, re-applied with `yoke apply`.
 */
let app: SshHost;
let other: SshHost;

beforeAll(async () => {
  [app, other] = await Promise.all([startSshHost('app'), startSshHost('other')]);
});
afterAll(async () => {
  await Promise.all([app.stop(), other.stop()]);
});

/** Runs `true` on app with other's host key pinned: the refusal it raises. */
async function mismatchAs(role: SshHostRole | undefined): Promise<YokeError> {
  const wrongKey = formatHostKey(parseHostKeyText(readFileSync(other.hostKeyFile, 'utf8'), other.hostKeyFile));
  const run = runOverSsh(
    {
      name: 'badkey',
      role,
      host: app.host,
      port: app.port,
      user: app.user,
      privateKey: () => readCredential(app.credential),
      hostKey: wrongKey,
    },
    'true',
    DEFAULT_SSH_TIMEOUTS,
  );
  return (await run.then(
    () => {
      throw new Error('the mismatched host key was accepted');
    },
    (err: unknown) => err,
  )) as YokeError;
}

test('issue 10 host_key_mismatch on a deploy host names the deploy host and re-pinning it in the project definition', async () => {
  const err = await mismatchAs('deploy_host');
  expect(err.code).toBe('host_key_mismatch');
  expect(err.message).toMatch(/^deploy host badkey \(127\.0\.0\.1:\d+\) presented host key /);
  expect(err.message).not.toMatch(/test machine/);
  expect(err.recovery).toMatch(/host_key_file/);
  expect(err.recovery).toMatch(/project definition/);
  expect(err.recovery).toMatch(/yoke apply -f FILE/);
  expect(err.recovery).not.toMatch(/test-machine/);
  expect(err.details).toMatchObject({ deploy_host: 'badkey' });
});

test('issue 10 issue 3 host_key_mismatch on a test machine names the test machine and re-pinning it in place', async () => {
  for (const role of [undefined, 'test_machine'] as const) {
    const err = await mismatchAs(role);
    expect(err.code).toBe('host_key_mismatch');
    expect(err.message).toMatch(/^test machine badkey \(127\.0\.0\.1:\d+\) presented host key /);
    expect(err.recovery).toMatch(
      /yoke test-machine repin badkey --host-key-file NEW_KEY\.pub, then yoke test-machine verify badkey/,
    );
    expect(err.recovery).not.toMatch(/test-machine remove/);
    expect(err.details).toMatchObject({ test_machine: 'badkey' });
  }
});

test('W3 a host that refuses the login is still ssh_unavailable, said as the user or key it refused, not as a host out of reach', async () => {
  const pinned = formatHostKey(parseHostKeyText(readFileSync(app.hostKeyFile, 'utf8'), app.hostKeyFile));
  const refused = await runOverSsh(
    {
      name: 'wronguser',
      host: app.host,
      port: app.port,
      user: 'nobody-here',
      privateKey: () => readCredential(other.credential),
      hostKey: pinned,
    },
    'true',
    DEFAULT_SSH_TIMEOUTS,
  ).then(
    () => {
      throw new Error('the login was accepted');
    },
    (err: unknown) => err as Error,
  );
  expect(refused.constructor.name).toBe('SshUnavailable');
  expect(refused.message).toContain(`refused the login as nobody-here`);
  expect(refused.message).toContain('authorized_keys');
});
