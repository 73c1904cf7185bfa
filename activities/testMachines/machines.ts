import { readFileSync } from 'node:fs';
import type { Kysely } from 'kysely';
import type { CheckRow, Database, TestMachineRow } from '../../db/database';
import {
  deleteTestMachine,
  insertTestMachine,
  lastCheck,
  liveTestMachineHolder,
  lockTestMachineForRemoval,
  testMachineByName,
  testMachines,
  updateHostKey,
} from '../../db/testMachines';
import { isUnhealthy, lockLine, waitingCount, waitViews, type WaitView } from '../../db/waits';
import { CREDENTIAL_PATTERN, CREDENTIAL_RECOVERY } from '../../domain/credentials';
import { testMachineUnknown } from '../../domain/claimRefusals';
import { refusal, usageError } from '../../domain/errors';
import { fingerprint, formatHostKey, parseHostKeyText, parseStoredHostKey } from '../../domain/hostKeys';
import {
  readCredential,
  readIdentity,
  runOverSsh,
  SshUnavailable,
  type SshTarget,
  type SshTimeouts,
} from '../hosts/ssh';
import { closeLine, inLineTransaction, type LineDeps } from '../waitingLine';
import { installCredentialKey, uninstallCredentialKey } from '../hosts/installKey';
import { requireAdmin } from '../../db/actors';
import { recordEvent } from '../../db/events';
import { sshKeyDir } from '../../config/paths';

export interface AddTestMachineInput {
  name: string;
  host: string;
  port: number;
  user: string;
  /** Issue 13: the worker's key (a name in YOKE_SSH_KEY_DIR) the machine is reached with. */
  credential: string;
  /**
   * Only for this process's first-use probe when no --host-key-file is given: the key to pin the
   * host key with. Never stored; the worker reads the credential only.
   */
  identityFile?: string;
  hostKeyFile?: string;
  verifyCommand?: string;
  captureCommand?: string;
}

/** A recorded check as readers see it: the row without its store-only fields, instants as ISO strings. */
export type CheckRecord = Omit<
  CheckRow,
  'request_id' | 'output_excerpt' | 'qa_plan_execution_id' | 'started_at' | 'finished_at'
> & {
  started_at: string;
  finished_at: string;
};

export interface TestMachineView {
  name: string;
  host: string;
  port: number;
  user: string;
  credential: string;
  host_key_fingerprint: string;
  host_key_source: TestMachineRow['host_key_source'];
  verify_command: string;
  capture_command: string;
  added_at: string;
  healthy: boolean;
  last_verification: CheckRecord | null;
  last_golden_capture: CheckRecord | null;
  holder: { claim_id: number; session_id: string; claimed_at: string; reserved_until: string | null } | null;
  waiting: number;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$/;

export function checkRecord(r: CheckRow): CheckRecord {
  return {
    check_id: r.check_id,
    test_machine: r.test_machine,
    kind: r.kind,
    passed: r.passed,
    reason: r.reason,
    exit_code: r.exit_code,
    output_digest: r.output_digest,
    session_id: r.session_id,
    started_at: r.started_at.toISOString(),
    finished_at: r.finished_at.toISOString(),
  };
}

export async function machineRow(db: Kysely<Database>, name: string): Promise<TestMachineRow> {
  const row = await testMachineByName(db, name);
  if (!row) throw testMachineUnknown(name);
  return row;
}

/** The host key a --host-key-file holds, in its stored form. */
function hostKeyFromFile(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw usageError('invalid_host_key_file', `cannot read host key file ${file}: ${(err as Error).message}`, {
      recovery: "pass the host's public key file with --host-key-file",
      details: { file },
    });
  }
  return formatHostKey(parseHostKeyText(text, file));
}

/** The host key to pin: read from --host-key-file, or presented on a first connection (trust on first use). */
async function hostKeyToPin(
  input: AddTestMachineInput,
  ssh: SshTimeouts,
): Promise<{ hostKey: string; source: TestMachineRow['host_key_source'] }> {
  if (input.hostKeyFile) return { hostKey: hostKeyFromFile(input.hostKeyFile), source: 'host_key_file' };
  const probe: SshTarget = {
    name: input.name,
    host: input.host,
    port: input.port,
    user: input.user,
    // The probe runs in this process (the CLI), with its own copy of the key or the path given.
    privateKey: () =>
      input.identityFile ? readIdentity(input.identityFile) : readCredential(input.credential, ssh.keyDir),
  };
  try {
    const { presented_host_key } = await runOverSsh(probe, 'true', { ...ssh, commandTimeoutMs: ssh.connectTimeoutMs });
    return { hostKey: presented_host_key, source: 'trust_on_first_use' };
  } catch (err) {
    if (!(err instanceof SshUnavailable)) throw err;
    throw refusal('ssh_unavailable', `cannot pin the host key of ${input.name}: ${err.detail}`, {
      recovery: `make ${input.host}:${input.port} reachable with that identity, or pass its public key with --host-key-file`,
      details: { test_machine: input.name, host: input.host, port: input.port },
    });
  }
}

/** C3: a machine's name is checked first, whichever way its key is given. */
function requireMachineName(name: string): void {
  if (NAME.test(name)) return;
  throw usageError('invalid_test_machine_name', `test machine name "${name}" must be letters, digits and . _ : / @ -`, {
    recovery: 'choose a name like lab-mac-1',
    details: { test_machine: name },
  });
}

/** Adds a machine and pins its host key. */
export async function addTestMachine(
  deps: { db: Kysely<Database>; ssh: SshTimeouts },
  input: AddTestMachineInput,
): Promise<TestMachineView> {
  const { db } = deps;
  requireMachineName(input.name);
  if (!CREDENTIAL_PATTERN.test(input.credential)) {
    throw usageError(
      'invalid_credential',
      `--credential ${input.credential}: a credential is a key's name, never a path`,
      {
        recovery: CREDENTIAL_RECOVERY,
        details: { option: '--credential', credential: input.credential },
      },
    );
  }
  // Issue 13: test machines are admins'; anyone else is refused before the CLI dials the host
  // with a key of the worker's (it said ssh_unavailable or credential_unknown, then refused).
  await requireAdmin(db, `add test machine ${input.name}`);
  await requireNewMachine(db, input.name);
  const { hostKey, source } = await hostKeyToPin(input, deps.ssh);
  const inserted = await insertTestMachine(db, {
    name: input.name,
    host: input.host,
    port: input.port,
    ssh_user: input.user,
    credential: input.credential,
    host_key: hostKey,
    host_key_fingerprint: fingerprint(parseStoredHostKey(hostKey)),
    host_key_source: source,
    verify_command: input.verifyCommand ?? 'true',
    capture_command: input.captureCommand ?? 'true',
  });
  // C3: a concurrent add of the same name won between the check above and this insert: refused
  // as the check refuses, never answered with the winner's row (its host, not this caller's)
  if (!inserted) throw machineExists(input.name);
  const [view] = await listTestMachines(deps, { name: input.name });
  return view!;
}

function machineExists(name: string) {
  return refusal('test_machine_exists', `test machine ${name} is already added`, {
    recovery: `to re-pin its host key: yoke test-machine repin ${name} --host-key-file K; to change anything else: yoke test-machine remove ${name}, then add it again`,
    details: { test_machine: name },
  });
}

/** A name already added is refused as such, before anything (a key copy) is written for it. */
async function requireNewMachine(db: Kysely<Database>, name: string): Promise<void> {
  if (await testMachineByName(db, name)) throw machineExists(name);
}

/**
 * Issue 3's single-user form, kept under issue 13: `test-machine add NAME --identity-file F`
 * without `--credential` copies F into the worker's key directory as NAME and records credential
 * NAME, so the worker still opens only its own keys. Only a caller who may add machines (an
 * admin) gets the copy: anyone else is refused before a byte is written. A machine that is not
 * added leaves no copy behind.
 */
export async function addTestMachineCopyingKey(
  deps: { db: Kysely<Database>; ssh: SshTimeouts },
  input: Omit<AddTestMachineInput, 'credential'> & { identityFile: string },
): Promise<TestMachineView & { credential_key_file: string; note: string }> {
  // the key is copied as the machine's name: a bad name is named as such, not as a bad credential
  requireMachineName(input.name);
  const key = readIdentity(input.identityFile);
  await requireAdmin(deps.db, `add test machine ${input.name}`);
  await requireNewMachine(deps.db, input.name);
  const installed = installCredentialKey(deps.ssh.keyDir ?? sshKeyDir(), input.name, key);
  let view: TestMachineView;
  try {
    view = await addTestMachine(deps, { ...input, credential: installed.credential });
  } catch (err) {
    // A concurrent add of the same name with the same key won the insert: the copy this call
    // made is the one the winner's credential names (it found it there), so it stays.
    const winner = await testMachineByName(deps.db, input.name).catch(() => undefined);
    if (winner?.credential !== installed.credential) uninstallCredentialKey(installed);
    throw err;
  }
  const note = `${installed.created ? 'copied' : 'found'} ${input.identityFile} ${installed.created ? 'to' : 'already at'} ${installed.key_file} (the worker's key directory) and recorded credential ${installed.credential}; the worker logs in with that copy, never with ${input.identityFile}`;
  return { ...view, credential_key_file: installed.key_file, note };
}

export async function listTestMachines(
  { db }: { db: Kysely<Database> },
  filter: { name?: string } = {},
): Promise<TestMachineView[]> {
  const views: TestMachineView[] = [];
  for (const m of await testMachines(db, filter)) {
    const [verification, capture, holder, unhealthy, waiting] = await Promise.all([
      lastCheck(db, m.name, 'verification', { passedOnly: false }),
      lastCheck(db, m.name, 'golden_capture', { passedOnly: false }),
      liveTestMachineHolder(db, m.name, { includeReserved: true }),
      isUnhealthy(db, m.name),
      waitingCount(db, m.name),
    ]);
    views.push({
      name: m.name,
      host: m.host,
      port: m.port,
      user: m.ssh_user,
      credential: m.credential,
      host_key_fingerprint: m.host_key_fingerprint,
      host_key_source: m.host_key_source,
      verify_command: m.verify_command,
      capture_command: m.capture_command,
      added_at: m.added_at.toISOString(),
      healthy: !unhealthy,
      last_verification: verification ? checkRecord(verification) : null,
      last_golden_capture: capture ? checkRecord(capture) : null,
      holder: holder
        ? {
            claim_id: holder.claim_id,
            session_id: holder.session_id,
            claimed_at: holder.claimed_at.toISOString(),
            reserved_until: holder.reserved_until?.toISOString() ?? null,
          }
        : null,
      waiting,
    });
  }
  return views;
}

/** Removes a machine nobody holds; its open waits are cancelled. Its check history stays. */
export async function removeTestMachine(
  deps: LineDeps,
  input: { name: string },
): Promise<{ name: string; cancelled_waits: number }> {
  await machineRow(deps.db, input.name);
  // Issue 13: a non-admin is refused as such, not told to release another session's claim first.
  await requireAdmin(deps.db, `remove test machine ${input.name}`);
  const { value } = await inLineTransaction(deps.db, deps.notifier, async (trx, effects) => {
    await lockLine(trx, input.name);
    // C3: the row is locked before the holds are read: an acquire locks it FOR KEY SHARE in its
    // one statement (no line lock), so it either committed its hold before this lock (read
    // below, refused test_machine_in_use) or waits for the removal and finds no machine.
    if (!(await lockTestMachineForRemoval(trx, input.name))) throw testMachineUnknown(input.name);
    const held = await liveTestMachineHolder(trx, input.name, { includeReserved: false });
    if (held) {
      throw refusal(
        'test_machine_in_use',
        `test machine ${input.name} is held by claim ${held.claim_id} (session ${held.session_id})`,
        {
          recovery: `wait for its release, or release it: yoke claims work release --claim-id ${held.claim_id} --reason R`,
          details: { test_machine: input.name, claim_id: held.claim_id, session_id: held.session_id },
        },
      );
    }
    await deleteTestMachine(trx, input.name);
    await closeLine(trx, input.name, 'test_machine_removed', effects);
    return { name: input.name, cancelled_waits: effects.cancelled.length };
  });
  return value;
}

/**
 * Issue 3 (W3, W8): a machine re-imaged with a new host key is re-pinned in place, its waiting
 * line and holds kept (removing and adding it again cancelled every wait). The key comes from
 * a file, never from a connection: a changed key is exactly what trust on first use must not
 * accept. Audited (TestMachineRepinned, both fingerprints). The machine's record of checks is
 * kept: one that failed stays unhealthy until a verify with the new key passes (W8).
 */
export async function repinHostKey(
  deps: LineDeps,
  input: { name: string; hostKeyFile: string },
): Promise<TestMachineView & { previous_host_key_fingerprint: string }> {
  const before = await machineRow(deps.db, input.name);
  await requireAdmin(deps.db, `re-pin test machine ${input.name}`);
  const hostKey = hostKeyFromFile(input.hostKeyFile);
  const pinned = fingerprint(parseStoredHostKey(hostKey));
  await deps.db.transaction().execute(async (trx) => {
    await updateHostKey(trx, input.name, {
      host_key: hostKey,
      host_key_fingerprint: pinned,
      host_key_source: 'host_key_file',
    });
    await recordEvent(trx, {
      event_type: 'TestMachineRepinned',
      payload: { test_machine: input.name, from: before.host_key_fingerprint, to: pinned },
    });
  });
  const [view] = await listTestMachines(deps, { name: input.name });
  return { ...view!, previous_host_key_fingerprint: before.host_key_fingerprint };
}

export type { WaitView };

export async function listWaits(
  { db }: { db: Kysely<Database> },
  filter: { testMachine?: string; sessionId?: string; all?: boolean },
): Promise<WaitView[]> {
  return waitViews(db, { testMachine: filter.testMachine, sessionId: filter.sessionId, openOnly: !filter.all });
}
