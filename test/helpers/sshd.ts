import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { userInfo, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, portAnswers, waitForPort } from '../../scripts/net';
import { placeCredential } from './sshKeys';

/**
 * A real OpenSSH server on a loopback port with throwaway keys: a test machine for tests.
 * `stop()` takes it down (to prove ssh_unavailable) and `start()` brings it back on the same
 * port with the same host key.
 */
export interface SshHost {
  name: string;
  host: string;
  port: number;
  user: string;
  /** The client key's file (the host trusts it); tests give it to the CLI's --identity-file probe only. */
  identityFile: string;
  /** Issue 13: the same key placed in the worker's key directory: what test machines and deploy hosts name. */
  credential: string;
  hostKeyFile: string;
  /** A folder on the host the test controls (verification commands read files in it). */
  dir: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Replaces the host key (a re-imaged machine) and restarts. */
  rekey(): Promise<void>;
}

const SSHD = process.env.SSHD ?? '/usr/sbin/sshd';

/**
 * Every process under `pid` (its connections' sshd processes and the commands they run),
 * read from /proc. A remote command runs in a session of its own (setsid), so a process group
 * would miss it, and once the listening sshd is gone its children belong to init: the tree is
 * read while the listener still lives.
 */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      found.push(c);
      walk(c);
    }
  };
  walk(pid);
  return found;
}

/**
 * The processes whose command line names `dir`: a command the machine ran for a test, even one
 * whose connection dropped first (its sshd session exited and it was re-parented away from sshd).
 */
function mentioning(dir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(dir)) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** SIGKILLs the processes; each may have exited already. */
function killAll(pids: number[]): void {
  for (const p of pids) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

export async function startSshHost(name: string): Promise<SshHost> {
  const dir = mkdtempSync(join(tmpdir(), `yoke-sshd-${name}-`));
  const port = await freePort();
  const keygen = (file: string) => execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', file]);
  keygen(join(dir, 'host_key'));
  keygen(join(dir, 'client_key'));
  writeFileSync(join(dir, 'authorized_keys'), readFileSync(join(dir, 'client_key.pub')));
  writeFileSync(
    join(dir, 'sshd_config'),
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${join(dir, 'host_key')}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      `PidFile ${join(dir, 'sshd.pid')}`,
      'StrictModes no',
      'UsePAM no',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'PermitRootLogin prohibit-password',
      'PubkeyAuthentication yes',
      'LogLevel ERROR',
      // The hosts' sessions get a home of their own, so the machine user's login scripts never run
      // in them: this machine's ~/.bashrc runs `pyenv rehash`, whose lock a session killed
      // mid-login (a command timeout) leaves behind, and every later login then waited 60 s for it.
      `SetEnv HOME=${dir}`,
    ].join('\n') + '\n',
  );
  mkdirSync('/run/sshd', { recursive: true }); // sshd's privilege-separation directory

  let child: ChildProcess | undefined;
  const host: SshHost = {
    name,
    host: '127.0.0.1',
    port,
    user: userInfo().username,
    identityFile: join(dir, 'client_key'),
    credential: placeCredential(`${name}-${port}`, join(dir, 'client_key')),
    hostKeyFile: join(dir, 'host_key.pub'),
    dir,
    async start() {
      child = spawn(SSHD, ['-D', '-e', '-f', join(dir, 'sshd_config')], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr!.on('data', (d) => (stderr += d));
      const exited = new Promise<never>((_, reject) =>
        child!.once('exit', (code) => reject(new Error(`sshd for ${name} exited ${code}: ${stderr}`))),
      );
      await Promise.race([waitForPort(port, '127.0.0.1', 10_000, `sshd ${name}`), exited]);
      child.removeAllListeners('exit');
    },
    async stop() {
      if (!child || child.exitCode !== null) return;
      const gone = new Promise((r) => child!.once('exit', r));
      // The machine goes down whole: its open connections and the commands they run die with
      // it (a dropped connection, as when sshd or the host dies), and nothing outlives the test.
      const under = descendants(child.pid!);
      child.kill('SIGKILL');
      killAll([...under, ...mentioning(dir)]);
      await gone;
      while (await portAnswers(port)) await new Promise((r) => setTimeout(r, 50));
    },
    async rekey() {
      await host.stop();
      execFileSync('rm', ['-f', join(dir, 'host_key'), join(dir, 'host_key.pub')]);
      keygen(join(dir, 'host_key'));
      await host.start();
    },
  };
  // A test run that dies before its teardown must not leave sshd listening.
  process.once('exit', () => {
    killAll(mentioning(dir)); // commands left running by the test, whatever became of their connection
    if (!child || child.exitCode !== null) return;
    killAll(descendants(child.pid!));
    child.kill('SIGKILL');
  });
  await host.start();
  return host;
}
