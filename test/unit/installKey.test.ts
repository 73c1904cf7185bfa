import { mkdtempSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installCredentialKey } from '../../activities/hosts/installKey';

const key = Buffer.from('-----BEGIN OPENSSH PRIVATE KEY-----\nstand-in\n-----END OPENSSH PRIVATE KEY-----\n');

test('I3 the copied key goes into a key directory made mode 700, mode 600, and never replaces what is there under that name (another key, a link, a name that is a path)', () => {
  const keyDir = join(mkdtempSync(join(tmpdir(), 'yoke-install-')), 'ssh-keys');
  expect(installCredentialKey(keyDir, 'lab-1', key)).toMatchObject({ credential: 'lab-1', created: true });
  expect(statSync(keyDir).mode & 0o777).toBe(0o700);
  expect(statSync(join(keyDir, 'lab-1')).mode & 0o777).toBe(0o600);
  expect(installCredentialKey(keyDir, 'lab-1', key)).toMatchObject({ created: false });

  writeFileSync(join(keyDir, 'other'), 'another key\n');
  symlinkSync(join(keyDir, 'nowhere'), join(keyDir, 'dangling'));
  for (const name of ['other', 'dangling'])
    expect(() => installCredentialKey(keyDir, name, key)).toThrow(
      expect.objectContaining({ code: 'credential_key_exists' }),
    );
  expect(readFileSync(join(keyDir, 'other'), 'utf8')).toBe('another key\n');
  expect(() => installCredentialKey(keyDir, 'lab:1/x', key)).toThrow(
    expect.objectContaining({ code: 'invalid_credential' }),
  );
});
