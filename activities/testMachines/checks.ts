import type { SshTimeouts } from '../hosts/ssh';
import { readCredential, runOverSsh, SshUnavailable, type CommandResult } from '../hosts/ssh';
import type { CheckRow } from '../../db/database';
import { checkHeldBefore, recordCheckHold } from '../../db/checkHolds';
import { checkByRequestId, insertCheck } from '../../db/testMachines';
import { sessionById } from '../../db/sessions';
import { lockLine, stateOfReservationWait } from '../../db/waits';
import type { CheckKind } from '../../domain/checkKinds';
import { YokeError } from '../../domain/errors';
import { operatorKeyOf } from '../../domain/operatorKeys';
import { acquireCoordinationClaim } from '../claims/acquire';
import {
  expireReservations,
  inLineTransaction,
  lockClaimForRelease,
  releaseServingLine,
  type LineDeps,
  type Reservation,
} from '../waitingLine';
import { checkRecord, machineRow, type CheckRecord } from './machines';

export type CheckDeps = LineDeps & { ssh: SshTimeouts };

/** What running a verification or golden capture found, before it is recorded. */
// A connection failure is always recorded as a failed verification (W3).
export type CheckOutcome = Pick<
  CheckRow,
  'kind' | 'passed' | 'reason' | 'exit_code' | 'output_digest' | 'output_excerpt'
> & { started_at: string };

const EXCERPT_CHARS = 4000;

/**
 * A check holds the machine like any QA run, ahead of the line and even when unhealthy (W8).
 * When its session already holds the machine (the holder checks its own machine mid-suite),
 * the check runs under that hold and its end keeps it: recorded under the request id first.
 */
export async function beginCheck(
  deps: LineDeps,
  input: { testMachine: string; sessionId: string; requestId?: string },
): Promise<{ claim_id: number; held_before: boolean }> {
  await machineRow(deps.db, input.testMachine);
  const heldBefore = input.requestId
    ? await recordCheckHold(deps.db, {
        request_id: input.requestId,
        test_machine: input.testMachine,
        session_id: input.sessionId,
      })
    : false;
  const { claim } = await acquireCoordinationClaim(deps, {
    sessionId: input.sessionId,
    key: operatorKeyOf('qa_admission', { test_machine: input.testMachine })!,
    bypassLine: true,
  });
  return { claim_id: claim.claim_id, held_before: heldBefore };
}

/**
 * Runs the machine's verification or capture command over SSH. A connection failure is
 * a failed verification with reason ssh_unavailable (W3), whatever was being run; a
 * changed host key is a failed verification too, and is raised as host_key_mismatch.
 */
export async function runCheckCommand(
  deps: CheckDeps,
  input: { testMachine: string; kind: CheckKind },
  control: { signal?: AbortSignal; onProgress?: () => void } = {},
): Promise<CheckOutcome> {
  const row = await machineRow(deps.db, input.testMachine);
  const command = input.kind === 'verification' ? row.verify_command : row.capture_command;
  const startedAt = new Date().toISOString();
  const target = {
    name: row.name,
    host: row.host,
    port: row.port,
    user: row.ssh_user,
    privateKey: () => readCredential(row.credential, deps.ssh.keyDir),
    hostKey: row.host_key,
  };
  let result: CommandResult;
  try {
    result = await runOverSsh(target, command, { ...deps.ssh, ...control });
  } catch (err) {
    const reason =
      err instanceof SshUnavailable
        ? 'ssh_unavailable'
        : err instanceof YokeError && (err.code === 'host_key_mismatch' || err.code === 'credential_unknown')
          ? err.code
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
 * Records the check and releases the machine in one transaction (unless the session held it
 * before the check began: W8). The release serves the
 * line only if the machine is healthy after this record (W8: the release that ends a
 * successful verify on an unhealthy machine is the one that serves it).
 */
export async function finishCheck(
  deps: LineDeps,
  input: {
    testMachine: string;
    sessionId: string;
    claimId: number;
    outcome: CheckOutcome | null;
    requestId: string;
  },
): Promise<{ check: CheckRecord | null; reservations: Reservation[] }> {
  const { lifetimeMs } = deps;
  const { value, effects } = await inLineTransaction(deps.db, deps.notifier, async (trx, lineEffects) => {
    const outcome = input.outcome;
    if (outcome) {
      await insertCheck(trx, {
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
      });
    }
    // W8: a check by the holder keeps the hold; only a hold the check took is released
    const keep = await checkHeldBefore(trx, input.requestId);
    const claim = keep ? undefined : await lockClaimForRelease(trx, input.claimId);
    if (claim && !claim.released_at) {
      const holder = (await sessionById(trx, claim.session_id))!;
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
    const row = await checkByRequestId(trx, input.requestId);
    return row ? checkRecord(row) : null;
  });
  return { check: value, reservations: effects.reservations };
}

/** The wait workflow's timer fired: an unconsumed turn past its lifetime passes on (W9). */
export async function expireReservation(
  deps: LineDeps,
  input: { testMachine: string; claimId: number },
): Promise<{ state: 'reserved' | 'granted' | 'cancelled' }> {
  const { value } = await inLineTransaction(deps.db, deps.notifier, async (trx, effects) => {
    await lockLine(trx, input.testMachine);
    await expireReservations(trx, deps.lifetimeMs, effects, input.testMachine);
    const state = await stateOfReservationWait(trx, input.claimId);
    return { state: state === 'reserved' || state === 'granted' ? state : ('cancelled' as const) };
  });
  return value;
}
