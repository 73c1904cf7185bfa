import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { raisingApplicationFailures } from '../activities/failure';
import { temporalLineNotifier } from '../activities/lineSignals';
import { sweepActivities } from '../activities/sweep';
import { testMachineActivities } from '../activities/testMachines';
import type { SshTimeouts } from '../activities/hosts/ssh';
import { runStageActivities } from '../activities/runs/stages';

export interface ActivityDeps {
  db: Kysely<Database>;
  /** Signals the wait workflows; without it the line still works from Postgres alone. */
  temporal?: { client: Client; taskQueue: string };
  reservationLifetimeMs?: number;
  ssh?: Partial<SshTimeouts>;
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
    loadRunPlan: runs.loadRunPlan,
    beginStage: runs.beginStage,
    qaStageStatus: runs.qaStageStatus,
    approvalRecorded: runs.approvalRecorded,
    finishStage: runs.finishStage,
    completeRun: runs.completeRun,
    failRun: runs.failRun,
    runDeployAction: async (input: Parameters<typeof runs.runDeployAction>[0]) => {
      const ctx = Context.current();
      try {
        return await runs.runDeployAction(input, { signal: ctx.cancellationSignal, onProgress: () => ctx.heartbeat() });
      } catch (err) {
        if (ctx.cancellationSignal.aborted) await ctx.cancelled;
        throw err;
      }
    },
    ...sweepActivities({ db: deps.db, line }),
    beginCheck: machines.beginCheck,
    finishCheck: machines.finishCheck,
    expireReservation: machines.expireReservation,
    // Long SSH commands heartbeat, and a cancelled activity closes its connection.
    runCheckCommand: async (input: Parameters<typeof machines.runCheckCommand>[0]) => {
      const ctx = Context.current();
      try {
        return await machines.runCheckCommand(input, { signal: ctx.cancellationSignal, onProgress: () => ctx.heartbeat() });
      } catch (err) {
        if (ctx.cancellationSignal.aborted) await ctx.cancelled; // report a cancellation as one
        throw err;
      }
    },
  });
}

export type SweepActivities = ReturnType<typeof sweepActivities>;
export type YokeActivities = ReturnType<typeof createActivities>;
