import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Issue 13: the worker logs in with keys of its own, named by credential in YOKE_SSH_KEY_DIR.
 * Each test file gets a key directory, set in this process's environment (in-process workers
 * and activities read it) and passed to every `yoke` the CLI helper runs.
 */
export const testKeyDir = mkdtempSync(join(tmpdir(), 'yoke-ssh-keys-'));
process.env.YOKE_SSH_KEY_DIR = testKeyDir;

/** Places a private key in the test key directory under a credential name, as an operator would. */
export function placeCredential(credential: string, keyFile: string): string {
  copyFileSync(keyFile, join(testKeyDir, credential));
  return credential;
}
