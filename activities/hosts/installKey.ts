import { chmodSync, lstatSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CREDENTIAL_PATTERN } from '../../domain/credentials';
import { refusal, usageError } from '../../domain/errors';

export interface InstalledKey {
  credential: string;
  key_file: string;
  /** false: the same key was already there under that name (nothing written). */
  created: boolean;
}

/**
 * Issue 3 with issue 13: `test-machine add NAME --identity-file F` without `--credential` copies
 * the key (already read and checked by the caller) into the worker's key directory as NAME, so the
 * single-user quick start keeps working and the worker still opens only its own keys. The
 * directory is made mode 700, the key file mode 600; a different key already under that name is
 * never overwritten.
 */
export function installCredentialKey(keyDir: string, credential: string, key: Buffer): InstalledKey {
  if (!CREDENTIAL_PATTERN.test(credential)) {
    throw usageError(
      'invalid_credential',
      `${credential} cannot name a key file in the worker's key directory (letters, digits, . _ - only)`,
      {
        recovery: `place the key yourself and pass --credential NAME: cp KEY "${join(keyDir, 'NAME')}" && chmod 600 "${join(keyDir, 'NAME')}"`,
        details: { option: '--credential', credential },
      },
    );
  }
  const file = join(keyDir, credential);
  const unwritable = (err: unknown) =>
    refusal('key_dir_unwritable', `cannot write ${file}: ${(err as Error).message}`, {
      recovery: `make the worker's key directory ${keyDir} writable for you, or place the key there as its operator and pass --credential ${credential}`,
      details: { credential, key_dir: keyDir },
    });
  try {
    mkdirSync(keyDir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw unwritable(err);
  }
  let existing: Buffer | undefined;
  try {
    lstatSync(file);
    try {
      existing = readFileSync(file);
    } catch {
      existing = Buffer.alloc(0); // there but unreadable (or a dangling link): not ours to replace
    }
  } catch (err) {
    if ((err as { code?: string }).code !== 'ENOENT') throw err;
  }
  if (existing !== undefined) {
    if (existing.equals(key)) return { credential, key_file: file, created: false };
    throw refusal(
      'credential_key_exists',
      `the worker's key directory already holds a different key named ${credential} (${file})`,
      {
        recovery: `to log in with that key, pass --credential ${credential} instead of --identity-file; to replace it, remove ${file} first; or add the machine under another name`,
        details: { credential, key_file: file },
      },
    );
  }
  try {
    writeFileSync(file, key, { mode: 0o600, flag: 'wx' });
    chmodSync(file, 0o600); // never wider than 600, whatever the umask
  } catch (err) {
    throw unwritable(err);
  }
  return { credential, key_file: file, created: true };
}

/** Undoes installCredentialKey when the machine it was for was not added. */
export function uninstallCredentialKey(installed: InstalledKey): void {
  if (!installed.created) return;
  try {
    unlinkSync(installed.key_file);
  } catch {
    // already gone
  }
}
