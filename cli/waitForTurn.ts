import { setMaxListeners } from 'node:events';
import type { AcquireResult } from '../activities/claims';
import { listWaits, type WaitView } from '../activities/testMachines';
import { refusal, unreachable } from '../domain/errors';
import { awaitTurn, turnConsumed, waitWorkflowId } from '../workflows/definitions';
import type { CommandContext } from './context';
import { readThroughOutage } from './outage';

/** The resume command acting as a new session NEW (an ended session's own command is refused). */
function withSession(command: string, ended: string): string {
  const named = `--session ${ended}`;
  return command.includes(named) ? command.replace(named, '--session NEW') : `${command} --session NEW`;
}

/**
 * What a cancelled wait does next: most rejoin with the same command; an ended session cannot
 * (its command would answer session_ended), nor can anyone join a removed machine's line (its
 * command would answer test_machine_unknown).
 */
function cancelledRecovery(reason: string | null | undefined, opts: WaitOptions): string {
  if (reason === 'session_ended')
    return `session ${opts.sessionId} has ended: register a new one (yoke sessions register --session NEW) and join with it: ${withSession(opts.resumeCommand, opts.sessionId)}`;
  if (reason === 'test_machine_removed')
    return `${opts.testMachine} is no longer a test machine: choose another (yoke test-machine list), or ask an admin to add it back`;
  return `join again: ${opts.resumeCommand}`;
}

export interface WaitOptions {
  testMachine: string;
  sessionId: string;
  json: boolean;
  timeoutMs?: number;
  resumeCommand: string;
}

const POLL_MS = 1_000;

function elapsed(ms: number): string {
  const s = Math.floor(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

/**
 * One status line on stderr: rewritten in place on a terminal (with --json too: a person at
 * the terminal sees the place in line, issue 3), printed on change elsewhere. With --json and
 * no terminal, stderr stays for the one error a script parses.
 */
class Progress {
  private last = '';
  private lastPrinted = 0;
  constructor(private readonly json: boolean) {}

  show(line: string, key: string): void {
    if (process.stderr.isTTY) {
      process.stderr.write(`\r\x1b[2K${line}`);
    } else if (!this.json && (key !== this.last || Date.now() - this.lastPrinted > 30_000)) {
      process.stderr.write(`${line}\n`);
      this.lastPrinted = Date.now();
    }
    this.last = key;
  }

  done(): void {
    if (process.stderr.isTTY && this.last) process.stderr.write('\n');
  }
}

/**
 * `--wait`: blocks until the caller's turn is reserved, then consumes it. The wait workflow's
 * `awaitTurn` update wakes us the moment the release signals it (W7); Postgres, read every
 * second for the position shown, is the record and the fallback if Temporal is away. The
 * caller keeps the session alive meanwhile (the acquire command heartbeats it under --wait).
 */
export async function waitForTurn(
  ctx: CommandContext,
  opts: WaitOptions,
  consume: () => Promise<AcquireResult>,
): Promise<AcquireResult> {
  const started = Date.now();
  const progress = new Progress(opts.json);
  let woken: Promise<unknown> = new Promise(() => undefined);
  // The update's long poll is cancelled once we stop waiting: left open, it held the process
  // (and a --wait-timeout) about 20 s past the refusal already printed.
  const stopWaking = new AbortController();
  // The client's update call long-polls again every ~20 s and listens on the signal each time;
  // a wait of hours would print Node's MaxListenersExceededWarning to the user at the 11th poll.
  setMaxListeners(0, stopWaking.signal);
  try {
    const client = await ctx.temporal.get();
    woken = client
      .withAbortSignal(stopWaking.signal, () =>
        client.workflow.getHandle(waitWorkflowId(opts.testMachine, opts.sessionId)).executeUpdate(awaitTurn),
      )
      .catch(() => new Promise(() => undefined));
  } catch {
    progress.show('Temporal unreachable: watching Postgres for the turn', 'no-temporal');
  }
  // A Postgres outage pauses the wait (the place in line is kept in Postgres) instead of ending it.
  const outage = (message: string) => progress.show(`waiting for QA_HOST:${opts.testMachine}: ${message}`, 'outage');
  try {
    for (;;) {
      const line = await readThroughOutage(() => listWaits(ctx, { testMachine: opts.testMachine }), outage);
      const mine: WaitView | undefined = line.find((w) => w.session_id === opts.sessionId);
      if (!mine) {
        const [last] = (
          await readThroughOutage(
            () => listWaits(ctx, { testMachine: opts.testMachine, sessionId: opts.sessionId, all: true }),
            outage,
          )
        ).slice(-1);
        if (last?.state === 'granted') break;
        throw refusal(
          'wait_cancelled',
          `the wait of session ${opts.sessionId} for ${opts.testMachine} was cancelled (${last?.cancel_reason ?? 'no open wait'})`,
          {
            recovery: cancelledRecovery(last?.cancel_reason, opts),
            details: {
              test_machine: opts.testMachine,
              session_id: opts.sessionId,
              cancel_reason: last?.cancel_reason ?? null,
            },
          },
        );
      }
      if (mine.state === 'reserved') break;
      // Out of everyone in line, the reserved turn ahead included: positions count it too.
      const waiting = line.filter((w) => w.position !== null).length;
      progress.show(
        `waiting for QA_HOST:${opts.testMachine}: position ${mine.position ?? '?'} of ${waiting}, ${elapsed(Date.now() - started)}`,
        String(mine.position),
      );
      if (opts.timeoutMs !== undefined && Date.now() - started > opts.timeoutMs) {
        // exit 3, as every bounded CLI wait (issue 10): the wait ran out, nothing was refused
        throw unreachable(
          'wait_timeout',
          `still waiting for ${opts.testMachine} after ${elapsed(Date.now() - started)} (position ${mine.position})`,
          {
            recovery: `you keep your place in line; resume with: ${opts.resumeCommand}`,
            details: { test_machine: opts.testMachine, position: mine.position, queued_at: mine.queued_at },
          },
        );
      }
      const wake = woken.then(() => 'woken' as const);
      if ((await Promise.race([new Promise((r) => setTimeout(r, POLL_MS)), wake])) === 'woken')
        woken = new Promise(() => undefined); // read Postgres once more, then poll
    }
  } finally {
    stopWaking.abort();
    progress.done();
  }
  // Taking the turn again after a lost answer consumes it or re-enters the hold: safe to repeat.
  const result = await readThroughOutage(consume, outage);
  try {
    const client = await ctx.temporal.get();
    await client.workflow.getHandle(waitWorkflowId(opts.testMachine, opts.sessionId)).signal(turnConsumed);
  } catch {
    // The workflow finds the consumed turn in Postgres when its timer fires.
  }
  return result;
}
