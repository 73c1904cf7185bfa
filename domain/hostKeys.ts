import { createHash } from 'node:crypto';
import { usageError } from './errors';

/**
 * A pinned SSH host key: its algorithm name and the base64 public-key blob, as in an
 * OpenSSH `.pub` file or a known_hosts line. Pure (node:crypto hashing only).
 */
export interface HostKey {
  type: string;
  blob: string;
}

const KEY_TYPE =
  /^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|ssh-dss|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com)$/;

/** Reads the first key from a `.pub` file, an `ssh-keyscan` output or a known_hosts line. */
export function parseHostKeyText(text: string, source: string): HostKey {
  for (const line of text.split('\n')) {
    const tokens = line.trim().split(/\s+/);
    const at = tokens.findIndex((t) => KEY_TYPE.test(t));
    if (at >= 0 && tokens[at + 1] && /^[A-Za-z0-9+/]+=*$/.test(tokens[at + 1]!))
      return { type: tokens[at]!, blob: tokens[at + 1]! };
  }
  throw usageError('invalid_host_key_file', `${source} holds no SSH public host key`, {
    recovery:
      "pass the host's public key file (e.g. /etc/ssh/ssh_host_ed25519_key.pub, or one line of ssh-keyscan output)",
    details: { file: source },
  });
}

/** The key the server presented, as ssh2 hands it to a host verifier (the wire-format blob). */
export function hostKeyFromBlob(blob: Buffer): HostKey {
  const length = blob.readUInt32BE(0);
  return { type: blob.subarray(4, 4 + length).toString('ascii'), blob: blob.toString('base64') };
}

export function formatHostKey(key: HostKey): string {
  return `${key.type} ${key.blob}`;
}

export function parseStoredHostKey(stored: string): HostKey {
  const [type, blob] = stored.split(' ');
  return { type: type!, blob: blob! };
}

/** The fingerprint `ssh-keygen -l` prints: SHA256 of the blob, base64 without padding. */
export function fingerprint(key: HostKey): string {
  return `SHA256:${createHash('sha256').update(Buffer.from(key.blob, 'base64')).digest('base64').replace(/=+$/, '')}`;
}

/** Host-key algorithms to offer so the server presents the pinned key's type. */
export function hostKeyAlgorithms(key: HostKey): string[] {
  return key.type === 'ssh-rsa' ? ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'] : [key.type];
}
