import { createHash } from 'node:crypto';
import { readFileSync, realpathSync } from 'node:fs';
import { join, sep } from 'node:path';
import { Client, utils, type ConnectConfig } from 'ssh2';
import {
  fingerprint,
  formatHostKey,
  hostKeyAlgorithms,
  hostKeyFromBlob,
  parseStoredHostKey,
  type HostKey,
} from '../../domain/hostKeys';
import { sshKeyDir } from '../../config/paths';
import { CREDENTIAL_PATTERN, CREDENTIAL_RECOVERY } from '../../domain/credentials';
import { refusal, usageError, YokeError } from '../../domain/errors';
import { boundToConnection } from './boundCommand';

/**
 * What the host is to yoke: a test machine (registered with `yoke test-machine add`) or a
 * deploy host (a `hosts:` entry of the project definition). Each is re-pinned its own way.
 */
export type SshHostRole = 'test_machine' | 'deploy_host';

/** Where and as whom to run commands on a test machine or deploy host, with its pinned host key. */
export interface SshTarget {
  name: string;
  /** Test machine unless said otherwise. */
  role?: SshHostRole;
  host: string;
  port: number;
  user: string;
  /**
   * The private key, read when the connection is made: a credential in the worker's key
   * directory (readCredential), or, for the CLI's own first-use probe only, --identity-file.
   */
  privateKey: () => Buffer;
  /** "type base64" as pinned at `test-machine add`; undefined only while trusting on first use. */
  hostKey?: string;
}

export interface SshTimeouts {
  connectTimeoutMs: number;
  commandTimeoutMs: number;
  /** Issue 13: the worker's key directory (default YOKE_SSH_KEY_DIR, else .yoke/ssh-keys). */
  keyDir?: string;
}

export interface CommandResult {
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  stdout: string;
  stderr: string;
  /** sha256 over all of stdout followed by the sha256 of all of stderr (the streams interleave),
   * so it covers everything the command wrote, not only the kept excerpt. */
  output_digest: string;
  presented_host_key: string;
}

/** The caller cancelled the command (a cancelled activity): says nothing about the host. */
export class SshCancelled extends Error {
  constructor(readonly target: string) {
    super(`the command on ${target} was cancelled`);
  }
}

/** The host did not answer, refused us, or dropped the connection: W3's `ssh_unavailable`. */
export class SshUnavailable extends Error {
  constructor(
    readonly target: string,
    readonly detail: string,
    role: SshHostRole = 'test_machine',
  ) {
    super(`cannot reach ${roleLabel(role)} ${target} over SSH: ${detail}`);
  }
}

function roleLabel(role: SshHostRole): string {
  return role === 'deploy_host' ? 'deploy host' : 'test machine';
}

/**
 * A pinned host key that no longer matches: named for what the host is, with the way to re-pin
 * it. A test machine is re-pinned in place; a deploy host's key lives in the project definition (issue 10).
 */
export function hostKeyMismatch(target: SshTarget, pinned: string, presented: string) {
  const role = target.role ?? 'test_machine';
  const where = `${roleLabel(role)} ${target.name} (${target.host}:${target.port})`;
  return refusal('host_key_mismatch', `${where} presented host key ${presented}, not the pinned ${pinned}`, {
    recovery:
      role === 'deploy_host'
        ? `if the host was legitimately re-imaged, point host ${target.name}'s host_key_file in the project definition (hosts:) at its new public key, then re-apply the definition: yoke apply -f FILE`
        : `if the machine was legitimately re-imaged, re-pin it (its waiting line is kept): yoke test-machine repin ${target.name} --host-key-file NEW_KEY.pub, then yoke test-machine verify ${target.name}`,
    details:
      role === 'deploy_host'
        ? { deploy_host: target.name, pinned, presented }
        : { test_machine: target.name, pinned, presented },
  });
}

const KEEP_BYTES = 64 * 1024;

/**
 * Issue 13: the key a credential names, read from the worker's own key directory and nowhere
 * else. The name cannot be a path (CREDENTIAL_PATTERN), and a link that leads out of the
 * directory is refused too; a missing or unusable key is credential_unknown.
 */
/** Why the worker cannot log in with this credential (credential_unknown's message), or null when it can. */
export function missingCredential(credential: string, keyDir: string): string | null {
  try {
    readCredential(credential, keyDir);
    return null;
  } catch (err) {
    if (err instanceof YokeError && err.code === 'credential_unknown') return err.message;
    throw err;
  }
}

export function readCredential(credential: string, keyDir: string = sshKeyDir()): Buffer {
  const unknown = (why: string) =>
    refusal('credential_unknown', `SSH credential ${credential}: ${why}`, {
      recovery: CREDENTIAL_RECOVERY,
      details: { credential, key_dir: keyDir },
    });
  if (!CREDENTIAL_PATTERN.test(credential)) throw unknown('not a credential name (a key file name, never a path)');
  let file: string;
  try {
    const dir = realpathSync(keyDir);
    file = realpathSync(join(dir, credential));
    if (!file.startsWith(dir + sep)) throw unknown(`its key file leads out of the key directory ${keyDir}`);
  } catch (err) {
    if ((err as { code?: string }).code === 'credential_unknown') throw err;
    throw unknown(`the worker has no key of that name in ${keyDir}`);
  }
  let key: Buffer;
  try {
    key = readFileSync(file);
  } catch (err) {
    throw unknown(`cannot read its key file: ${(err as Error).message}`);
  }
  const parsed = utils.parseKey(key);
  if (parsed instanceof Error) throw unknown(`its key file is not a usable private key (${parsed.message})`);
  // a public key parses too, and only fails when ssh2 signs the login with it
  if (!parsed.isPrivateKey()) throw unknown('its key file holds a public key, not the private key');
  return key;
}

/**
 * The private key an SSH login uses: readable, and a key ssh2 can use (not a directory, not
 * text). Only the CLI reads a user's path, for its own first-use probe; it is never stored.
 */
export function readIdentity(path: string): Buffer {
  let key: Buffer;
  try {
    key = readFileSync(path);
  } catch (err) {
    throw usageError('identity_file_unreadable', `--identity-file: cannot read ${path}: ${(err as Error).message}`, {
      recovery: 'pass a readable private key with --identity-file',
      details: { option: '--identity-file', identity_file: path },
    });
  }
  const parsed = utils.parseKey(key);
  // a public key (the .pub beside a key) parses too: it would be stored and fail every login
  const problem = parsed instanceof Error ? parsed.message : parsed.isPrivateKey() ? null : 'it is a public key';
  if (problem !== null) {
    throw usageError('identity_file_not_a_key', `--identity-file: ${path} is not a usable private key (${problem})`, {
      recovery: 'pass an unencrypted OpenSSH or PEM private key with --identity-file',
      details: { option: '--identity-file', identity_file: path },
    });
  }
  return key;
}

export interface RunOptions extends SshTimeouts {
  /** Aborting closes the connection (Temporal activity cancellation). */
  signal?: AbortSignal;
  /** Called every few seconds while the command runs (activity heartbeats). */
  onProgress?: () => void;
}

/**
 * Runs one command over SSH and captures exit status, stdout and stderr. A host key that
 * differs from the pinned one is refused (`host_key_mismatch`), never ignored. The command dies
 * with the connection (boundCommand.ts): a timeout, a cancellation or a killed worker never
 * leaves it running on the host.
 */
export function runOverSsh(target: SshTarget, command: string, opts: RunOptions): Promise<CommandResult> {
  const pinned: HostKey | undefined = target.hostKey ? parseStoredHostKey(target.hostKey) : undefined;
  const privateKey = target.privateKey();
  return new Promise((resolve, reject) => {
    const conn = new Client();
    let presented: HostKey | undefined;
    let settled = false;
    let progress: NodeJS.Timeout | undefined;
    let commandTimer: NodeJS.Timeout | undefined;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearInterval(progress);
      clearTimeout(commandTimer);
      opts.signal?.removeEventListener('abort', onAbort);
      conn.end();
      fn();
    };
    const onAbort = () => finish(() => reject(new SshCancelled(target.name)));
    opts.signal?.addEventListener('abort', onAbort);

    const config: ConnectConfig = {
      host: target.host,
      port: target.port,
      username: target.user,
      privateKey,
      readyTimeout: opts.connectTimeoutMs,
      hostVerifier: (blob: Buffer) => {
        presented = hostKeyFromBlob(blob);
        return !pinned || (presented.type === pinned.type && presented.blob === pinned.blob);
      },
    };
    if (pinned) config.algorithms = { serverHostKey: hostKeyAlgorithms(pinned) as never };

    conn.on('error', (err: Error & { level?: string }) => {
      if (pinned && presented && (presented.blob !== pinned.blob || presented.type !== pinned.type)) {
        finish(() => reject(hostKeyMismatch(target, fingerprint(pinned), fingerprint(presented!))));
        return;
      }
      // The host answered and refused the login: still W3's ssh_unavailable, but said as what it
      // is (the user or key), so the recovery is not a look at the network.
      const detail =
        err.level === 'client-authentication'
          ? `${target.host}:${target.port} refused the login as ${target.user} (${err.message}): check the machine's user and that the credential's public key is in that user's authorized_keys`
          : err.message;
      finish(() => reject(new SshUnavailable(target.name, detail, target.role)));
    });
    conn.on('ready', () => {
      conn.exec(boundToConnection(command), (err, stream) => {
        if (err) return finish(() => reject(new SshUnavailable(target.name, err.message, target.role)));
        const hash = createHash('sha256');
        const out: Buffer[] = [];
        const errOut: Buffer[] = [];
        let outBytes = 0;
        let errBytes = 0;
        let timedOut = false;
        const errHash = createHash('sha256');
        stream.on('data', (d: Buffer) => {
          hash.update(d);
          if (outBytes < KEEP_BYTES) out.push(d.subarray(0, KEEP_BYTES - outBytes));
          outBytes += d.length;
        });
        stream.stderr.on('data', (d: Buffer) => {
          errHash.update(d);
          if (errBytes < KEEP_BYTES) errOut.push(d.subarray(0, KEEP_BYTES - errBytes));
          errBytes += d.length;
        });
        commandTimer = setTimeout(() => {
          timedOut = true;
          stream.close();
          conn.end();
        }, opts.commandTimeoutMs);
        stream.on('close', (code: number | null, signal: string | null) => {
          // W3: a stream that closes with neither an exit status nor a signal lost its connection
          // (sshd died, the network dropped): the host is unavailable, not the command failed.
          if (!timedOut && code == null && signal == null && !opts.signal?.aborted) {
            finish(() =>
              reject(
                new SshUnavailable(
                  target.name,
                  'the connection closed before the command reported its exit',
                  target.role,
                ),
              ),
            );
            return;
          }
          hash.update(errHash.digest());
          finish(() =>
            resolve({
              exit_code: timedOut ? null : (code ?? null),
              signal: signal ?? null,
              timed_out: timedOut,
              stdout: Buffer.concat(out).toString('utf8'),
              stderr: Buffer.concat(errOut).toString('utf8'),
              output_digest: `sha256:${hash.digest('hex')}`,
              presented_host_key: formatHostKey(presented!),
            }),
          );
        });
      });
    });
    // the heartbeat covers the handshake too: a host that accepts TCP and never speaks SSH is
    // ssh_unavailable at connectTimeoutMs, not a worker Temporal thinks has died
    if (opts.onProgress) progress = setInterval(opts.onProgress, 2_000);
    conn.connect(config);
  });
}
