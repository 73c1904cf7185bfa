import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { raisingApplicationFailures } from '../activities/failure';
import { temporalLineNotifier } from '../temporal/lineSignals';
import { sweepActivities } from '../activities/sweep';
import { testMachineActivities } from '../activities/testMachines';
import type { SshTimeouts } from '../activities/hosts/ssh';
import { runStageActivities } from '../activities/runs/stages';
import { sessionUsageActivities } from '../activities/usage/sessionUsage';

export interface ActivityDeps {
  db: Kysely<Database>;
  /** Signals the wait workflows; without it the line still works from Postgres alone. */
  temporal?: { client: Client; taskQueue: string };
  reservationLifetimeMs?: number;
  ssh?: Partial<SshTimeouts>;
}

type Control = { signal?: AbortSignal; onProgress?: () => void };

/**
 * A long activity (an SSH command, a deploy call) heartbeats while it runs, and a cancelled
 * one closes its connection and is reported as cancelled, not as a failure.
 */
function heartbeating<I, O>(fn: (input: I, control: Control) => Promise<O>): (input: I) => Promise<O> {
  return async (input: I) => {
    const ctx = Context.current();
    try {
      return await fn(input, { signal: ctx.cancellationSignal, onProgress: () => ctx.heartbeat() });
    } catch (err) {
      if (ctx.cancellationSignal.aborted) await ctx.cancelled;
      throw err;
    }
  };
}

/** The activities a yoke worker registers, built over its dependencies. */
export function createActivities(deps: ActivityDeps) {
  const line = {
    reservationLifetimeMs: deps.reservationLifetimeMs,
    notifier: deps.temporal ? temporalLineNotifier(deps.temporal.client, deps.temporal.taskQueue) : undefined,
  };
  const machines = testMachineActivities({ db: deps.db, ssh: deps.ssh, line });
  const runs = runStageActivities({ db: deps.db, ssh: deps.ssh });
  return raisingApplicationFailures({
    foldSessionUsage: sessionUsageActivities({ db: deps.db }).foldSessionUsage,
    loadRunPlan: runs.loadRunPlan,
    beginStage: runs.beginStage,
    qaStageStatus: runs.qaStageStatus,
    approvalRecorded: runs.approvalRecorded,
    finishStage: runs.finishStage,
    completeRun: runs.completeRun,
    failRun: runs.failRun,
    runDeployAction: heartbeating(runs.runDeployAction),
    ...sweepActivities({ db: deps.db, line }),
    beginCheck: machines.beginCheck,
    finishCheck: machines.finishCheck,
    expireReservation: machines.expireReservation,
    runCheckCommand: heartbeating(machines.runCheckCommand),
  });
}

export type YokeActivities = ReturnType<typeof createActivities>;
