import { readFileSync } from 'node:fs';
import type { Kysely } from 'kysely';
import { sql } from 'kysely';
import type { CheckRow, Database, TestMachineRow } from '../db/database';
import type { CheckKind } from '../domain/checkKinds';
import { lockLine, waitViews, type WaitView } from '../db/waits';
import { refusal, usageError, YokeError } from '../domain/errors';
import { fingerprint, formatHostKey, parseHostKeyText, parseStoredHostKey } from '../domain/hostKeys';
import { claimActivities } from './claims';
import { runOverSsh, SshUnavailable, type CommandResult, type SshTarget, type SshTimeouts } from './hosts/ssh';
import {
  DEFAULT_RESERVATION_LIFETIME_MS,
  closeLine,
  expireReservations,
  inLineTransaction,
  lockClaimForRelease,
  releaseServingLine,
  type LineOptions,
  type Reservation,
} from './waitingLine';

export const DEFAULT_SSH_TIMEOUTS: SshTimeouts = { connectTimeoutMs: 10_000, commandTimeoutMs: 600_000 };

export interface AddTestMachineInput {
  name: string;
  host: string;
  port: number;
  user: string;
  identityFile: string;
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
  identity_file: string;
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

/** What running a verification or golden capture found, before it is recorded. */
export interface CheckOutcome {
  /** A connection failure is always recorded as a failed verification (W3). */
  kind: CheckKind;
  passed: boolean;
  reason: string;
  exit_code: number | null;
  output_digest: string | null;
  output_excerpt: string | null;
  started_at: string;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$/;
const EXCERPT_CHARS = 4000;

function checkRecord(r: CheckRow): CheckRecord {
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

export function testMachineActivities(deps: {
  db: Kysely<Database>;
  ssh?: Partial<SshTimeouts>;
  line?: Partial<LineOptions>;
}) {
  const { db } = deps;
  const ssh: SshTimeouts = { ...DEFAULT_SSH_TIMEOUTS, ...deps.ssh };
  const lifetimeMs = deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;
  const notifier = deps.line?.notifier;
  const claims = claimActivities({ db, line: deps.line });

  async function machineRow(name: string): Promise<TestMachineRow> {
    const row = await db.selectFrom('test_machines').selectAll().where('name', '=', name).executeTakeFirst();
    if (!row) {
      throw refusal('test_machine_not_found', `no test machine is named ${name}`, {
        recovery: `add it: yoke test-machine add ${name} --host H --port P --user U --identity-file F`,
        details: { test_machine: name },
      });
    }
    return row;
  }

  function target(row: TestMachineRow): SshTarget {
    return {
      name: row.name,
      host: row.host,
      port: row.port,
      user: row.ssh_user,
      identityFile: row.identity_file,
      hostKey: row.host_key,
    };
  }

  /**
   * Adds a machine and pins its host key: from --host-key-file, or trust on first use (a
   * first connection with the identity, whose presented key is recorded).
   */
  async function addTestMachine(input: AddTestMachineInput): Promise<TestMachineView> {
    if (!NAME.test(input.name)) {
      throw usageError(
        'invalid_test_machine_name',
        `test machine name "${input.name}" must be letters, digits and . _ : / @ -`,
        {
          recovery: 'choose a name like lab-mac-1',
          details: { test_machine: input.name },
        },
      );
    }
    if (await db.selectFrom('test_machines').select('name').where('name', '=', input.name).executeTakeFirst()) {
      throw refusal('test_machine_exists', `test machine ${input.name} is already added`, {
        recovery: `to change it: yoke test-machine remove ${input.name}, then add it again`,
        details: { test_machine: input.name },
      });
    }
    let hostKey: string;
    let source: TestMachineRow['host_key_source'];
    if (input.hostKeyFile) {
      let text: string;
      try {
        text = readFileSync(input.hostKeyFile, 'utf8');
      } catch (err) {
        throw usageError(
          'invalid_host_key_file',
          `cannot read host key file ${input.hostKeyFile}: ${(err as Error).message}`,
          {
            recovery: "pass the host's public key file with --host-key-file",
            details: { file: input.hostKeyFile },
          },
        );
      }
      hostKey = formatHostKey(parseHostKeyText(text, input.hostKeyFile));
      source = 'host_key_file';
    } else {
      const probe: SshTarget = {
        name: input.name,
        host: input.host,
        port: input.port,
        user: input.user,
        identityFile: input.identityFile,
      };
      try {
        hostKey = (await runOverSsh(probe, 'true', { ...ssh, commandTimeoutMs: ssh.connectTimeoutMs }))
          .presented_host_key;
      } catch (err) {
        if (!(err instanceof SshUnavailable)) throw err;
        throw refusal('ssh_unavailable', `cannot pin the host key of ${input.name}: ${err.detail}`, {
          recovery: `make ${input.host}:${input.port} reachable with that identity, or pass its public key with --host-key-file`,
          details: { test_machine: input.name, host: input.host, port: input.port },
        });
      }
      source = 'trust_on_first_use';
    }
    await db
      .insertInto('test_machines')
      .values({
        name: input.name,
        host: input.host,
        port: input.port,
        ssh_user: input.user,
        identity_file: input.identityFile,
        host_key: hostKey,
        host_key_fingerprint: fingerprint(parseStoredHostKey(hostKey)),
        host_key_source: source,
        verify_command: input.verifyCommand ?? 'true',
        capture_command: input.captureCommand ?? 'true',
      })
      .onConflict((oc) => oc.doNothing())
      .execute();
    const [view] = await listTestMachines({ name: input.name });
    return view!;
  }

  async function listTestMachines(filter: { name?: string } = {}): Promise<TestMachineView[]> {
    const machines = await db
      .selectFrom('test_machines')
      .selectAll()
      .$if(!!filter.name, (q) => q.where('name', '=', filter.name!))
      .orderBy('name')
      .execute();
    const views: TestMachineView[] = [];
    for (const m of machines) {
      const last = (kind: CheckKind, passedOnly: boolean) =>
        db
          .selectFrom('test_machine_checks')
          .selectAll()
          .where('test_machine', '=', m.name)
          .where('kind', '=', kind)
          .$if(passedOnly, (q) => q.where('passed', '=', true))
          .orderBy('finished_at', 'desc')
          .orderBy('check_id', 'desc')
          .limit(1)
          .executeTakeFirst();
      const [verification, capture, holder, health, waiting] = await Promise.all([
        last('verification', false),
        last('golden_capture', false),
        db
          .selectFrom('work_claims')
          .select(['claim_id', 'session_id', 'claimed_at', 'reserved_until'])
          .where('target_kind', '=', 'qa_admission')
          .where(sql<string>`scope->>'test_machine'`, '=', m.name)
          .where('released_at', 'is', null)
          .executeTakeFirst(),
        sql<{ unhealthy: boolean }>`SELECT test_machine_unhealthy(${m.name}) AS unhealthy`.execute(db),
        db
          .selectFrom('qa_test_machine_waits')
          .select((e) => e.fn.countAll<number>().as('n'))
          .where('test_machine', '=', m.name)
          .where('state', '=', 'waiting')
          .executeTakeFirst(),
      ]);
      views.push({
        name: m.name,
        host: m.host,
        port: m.port,
        user: m.ssh_user,
        identity_file: m.identity_file,
        host_key_fingerprint: m.host_key_fingerprint,
        host_key_source: m.host_key_source,
        verify_command: m.verify_command,
        capture_command: m.capture_command,
        added_at: m.added_at.toISOString(),
        healthy: !health.rows[0]!.unhealthy,
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
        waiting: Number(waiting?.n ?? 0),
      });
    }
    return views;
  }

  /** Removes a machine nobody holds; its open waits are cancelled. Its check history stays. */
  async function removeTestMachine(input: { name: string }): Promise<{ name: string; cancelled_waits: number }> {
    await machineRow(input.name);
    const { value } = await inLineTransaction(db, notifier, async (trx, effects) => {
      await lockLine(trx, input.name);
      const held = await trx
        .selectFrom('work_claims')
        .select(['claim_id', 'session_id'])
        .where('target_kind', '=', 'qa_admission')
        .where(sql<string>`scope->>'test_machine'`, '=', input.name)
        .where('released_at', 'is', null)
        .where('reserved_until', 'is', null)
        .executeTakeFirst();
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
      await trx.deleteFrom('test_machines').where('name', '=', input.name).execute();
      await closeLine(trx, input.name, 'test_machine_removed', effects);
      return { name: input.name, cancelled_waits: effects.cancelled.length };
    });
    return value;
  }

  async function listWaits(filter: { testMachine?: string; all?: boolean }): Promise<WaitView[]> {
    return waitViews(db, { testMachine: filter.testMachine, openOnly: !filter.all });
  }

  /** A check holds the machine like any QA run, ahead of the line and even when unhealthy (W8). */
  async function beginCheck(input: { testMachine: string; sessionId: string }): Promise<{ claim_id: number }> {
    await machineRow(input.testMachine);
    const { claim } = await claims.acquireCoordinationClaim({
      sessionId: input.sessionId,
      key: `QA_HOST:${input.testMachine}`,
      bypassLine: true,
    });
    return { claim_id: claim.claim_id };
  }

  /**
   * Runs the machine's verification or capture command over SSH. A connection failure is
   * a failed verification with reason ssh_unavailable (W3), whatever was being run; a
   * changed host key is a failed verification too, and is raised as host_key_mismatch.
   */
  async function runCheckCommand(
    input: { testMachine: string; kind: CheckKind },
    control: { signal?: AbortSignal; onProgress?: () => void } = {},
  ): Promise<CheckOutcome> {
    const row = await machineRow(input.testMachine);
    const command = input.kind === 'verification' ? row.verify_command : row.capture_command;
    const startedAt = new Date().toISOString();
    let result: CommandResult;
    try {
      result = await runOverSsh(target(row), command, { ...ssh, ...control });
    } catch (err) {
      const reason =
        err instanceof SshUnavailable
          ? 'ssh_unavailable'
          : err instanceof YokeError && err.code === 'host_key_mismatch'
            ? 'host_key_mismatch'
            : undefined;
      if (!reason) throw err;
      return {
        kind: 'verification',
        passed: false,
        reason,
        exit_code: null,
        output_digest: null,
        output_excerpt: (err as Error).message.slice(0, EXCERPT_CHARS),
        started_at: startedAt,
      };
    }
    const passed = !result.timed_out && result.exit_code === 0;
    const reason = result.timed_out
      ? 'timeout'
      : passed
        ? 'passed'
        : result.exit_code === null
          ? `signal_${result.signal ?? 'unknown'}`
          : `exit_status_${result.exit_code}`;
    const excerpt = `${result.stdout}${result.stderr ? `\n[stderr]\n${result.stderr}` : ''}`.slice(-EXCERPT_CHARS);
    return {
      kind: input.kind,
      passed,
      reason,
      exit_code: result.exit_code,
      output_digest: result.output_digest,
      output_excerpt: excerpt,
      started_at: startedAt,
    };
  }

  /**
   * Records the check and releases the machine in one transaction. The release serves the
   * line only if the machine is healthy after this record (W8: the release that ends a
   * successful verify on an unhealthy machine is the one that serves it).
   */
  async function finishCheck(input: {
    testMachine: string;
    sessionId: string;
    claimId: number;
    outcome: CheckOutcome | null;
    requestId: string;
  }): Promise<{ check: CheckRecord | null; reservations: Reservation[] }> {
    const { value, effects } = await inLineTransaction(db, notifier, async (trx, lineEffects) => {
      const outcome = input.outcome;
      if (outcome) {
        await trx
          .insertInto('test_machine_checks')
          .values({
            request_id: input.requestId,
            test_machine: input.testMachine,
            kind: outcome.kind,
            passed: outcome.passed,
            reason: outcome.reason,
            exit_code: outcome.exit_code,
            output_digest: outcome.output_digest,
            output_excerpt: outcome.output_excerpt,
            session_id: input.sessionId,
            started_at: outcome.started_at,
          })
          .onConflict((oc) => oc.column('request_id').doNothing())
          .execute();
      }
      const claim = await lockClaimForRelease(trx, input.claimId);
      if (claim && !claim.released_at) {
        const holder = await trx
          .selectFrom('sessions')
          .select('actor_id')
          .where('session_id', '=', claim.session_id)
          .executeTakeFirstOrThrow();
        const reason = outcome ? `${outcome.kind} finished: ${outcome.reason}` : 'check did not finish';
        await releaseServingLine(
          trx,
          claim,
          { reason, bySessionId: input.sessionId, byActorId: holder.actor_id },
          lifetimeMs,
          lineEffects,
        );
      }
      await expireReservations(trx, lifetimeMs, lineEffects, input.testMachine);
      const row = await trx
        .selectFrom('test_machine_checks')
        .selectAll()
        .where('request_id', '=', input.requestId)
        .executeTakeFirst();
      return row ? checkRecord(row) : null;
    });
    return { check: value, reservations: effects.reservations };
  }

  /** The wait workflow's timer fired: an unconsumed turn past its lifetime passes on (W9). */
  async function expireReservation(input: {
    testMachine: string;
    claimId: number;
  }): Promise<{ state: 'reserved' | 'granted' | 'cancelled' }> {
    const { value } = await inLineTransaction(db, notifier, async (trx, effects) => {
      await lockLine(trx, input.testMachine);
      await expireReservations(trx, lifetimeMs, effects, input.testMachine);
      const wait = await trx
        .selectFrom('qa_test_machine_waits')
        .select('state')
        .where('claim_id', '=', input.claimId)
        .orderBy('wait_id', 'desc')
        .executeTakeFirst();
      const state: 'reserved' | 'granted' | 'cancelled' =
        wait?.state === 'reserved' || wait?.state === 'granted' ? wait.state : 'cancelled';
      return { state };
    });
    return value;
  }

  return {
    addTestMachine,
    listTestMachines,
    removeTestMachine,
    listWaits,
    beginCheck,
    runCheckCommand,
    finishCheck,
    expireReservation,
  };
}

export type TestMachineActivities = ReturnType<typeof testMachineActivities>;
