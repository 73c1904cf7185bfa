import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { raisingApplicationFailures } from '../activities/failure';
import { temporalLineNotifier } from '../temporal/lineSignals';
import { temporalRunWorkflows } from '../temporal/runWorkflows';
import { sweepActivities } from '../activities/sweep';
import { testMachineActivities } from '../activities/testMachines';
import type { SshTimeouts } from '../activities/hosts/ssh';
import { runStageActivities } from '../activities/runs/stages';
import { qaExecutionActivities } from '../activities/qa/executions';
import { temporalQaNotifier } from '../temporal/qaSignals';
import { runWorkflowActivities } from '../activities/runs/runWorkflows';
import { sessionUsageActivities } from '../activities/usage/sessionUsage';
import { settlementActivities, type SettlementDeps } from '../activities/settlement/settlement';
import type { TrackerFactory } from '../activities/settlement/tracker';

export interface ActivityDeps {
  db: Kysely<Database>;
  /** Folds' own small pool, so reading artifacts never takes the connections runs and lines need. */
  foldDb?: Kysely<Database>;
  /** Signals the wait workflows; without it the line still works from Postgres alone. */
  temporal?: { client: Client; taskQueue: string };
  reservationLifetimeMs?: number;
  ssh?: Partial<SshTimeouts>;
  /** S3: builds a project's issue tracker (default: GitHub per definition, else no-op). */
  tracker?: TrackerFactory;
  effectLeaseMs?: number;
  afterEffect?: SettlementDeps['afterEffect'];
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

/**
 * A settlement step heartbeats while it runs, so a worker killed mid-step is noticed within
 * the heartbeat timeout and the step is retried on another worker (it is idempotent).
 */
function beating<I, O>(fn: (input: I) => Promise<O>): (input: I) => Promise<O> {
  return async (input: I) => {
    const ctx = Context.current();
    const beat = setInterval(() => ctx.heartbeat(), 2_000);
    try {
      return await fn(input);
    } finally {
      clearInterval(beat);
    }
  };
}

/** Folds a worker runs at once: reading artifacts is bounded, but never allowed to crowd out runs and lines. */
export const FOLDS_AT_ONCE = 2;

/** `fn` with at most `limit` calls running at once; the rest wait their turn, in order. */
function atMost<I, O>(limit: number, fn: (input: I) => Promise<O>): (input: I) => Promise<O> {
  let running = 0;
  const queue: (() => void)[] = [];
  return async (input: I) => {
    if (running >= limit) await new Promise<void>((r) => queue.push(r));
    else running++;
    try {
      return await fn(input);
    } finally {
      const next = queue.shift();
      if (next) next();
      else running--;
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
  const qaNotifier = deps.temporal ? temporalQaNotifier(deps.temporal.client) : undefined;
  const settlement = settlementActivities({
    db: deps.db,
    tracker: deps.tracker,
    effectLeaseMs: deps.effectLeaseMs,
    afterEffect: deps.afterEffect,
    line, // S4: superseding an execution serves its line and stops its workflow
    qaNotifier,
  });
  const runs = runStageActivities({ db: deps.db, ssh: deps.ssh, line, qaNotifier });
  const qa = qaExecutionActivities({ db: deps.db, ssh: deps.ssh, line, qaNotifier });
  // The run's steps retry only infrastructure failures; anything else is recorded on the run.
  const runSteps = raisingApplicationFailures(
    {
      loadRunPlan: runs.loadRunPlan,
      runStatus: runs.runStatus,
      beginStage: runs.beginStage,
      stageWait: runs.stageWait,
      finishStage: runs.finishStage,
      failRun: runs.failRun,
      blockingQaHold: runs.blockingQaHold,
      runDeployAction: heartbeating(runs.runDeployAction),
    },
    { bugsAreFinal: true },
  );
  // A QA plan execution's steps too (issue 10): infrastructure failures are retried (or, for a
  // case's command, the case runs again); anything else is recorded as the execution's end.
  const qaSteps = raisingApplicationFailures(
    {
      acquireHost: qa.acquireHost,
      recordStepOutcome: qa.recordStepOutcome,
      recordSshUnavailable: qa.recordSshUnavailable,
      recordStepInterrupted: qa.recordStepInterrupted,
      // Issue 13: verdicts and waivers are the CLI's to write under its caller's role; the worker only reads them.
      recordedCases: qa.recordedCases,
      executionStatus: qa.executionStatus,
      finishExecution: qa.finishExecution,
      runStepCommand: heartbeating(qa.runStepCommand),
    },
    { bugsAreFinal: true },
  );
  return raisingApplicationFailures({
    // The fold workflow folds only the requests recorded in Postgres (never a path from a signal).
    foldRequestedUsage: atMost(
      FOLDS_AT_ONCE,
      sessionUsageActivities({ db: deps.foldDb ?? deps.db }).foldRequestedUsage,
    ),
    ...runSteps,
    beginSettling: beating(settlement.beginSettling),
    commitRunSettlement: beating(settlement.commitRunSettlement),
    applyRunSettlementEffects: beating(settlement.applyRunSettlementEffects),
    finishRunSettlement: beating(settlement.finishRunSettlement),
    ...sweepActivities({ db: deps.db, line }),
    // The reconciler: executing runs whose workflow is not running get one (sweep schedule).
    reattachStrandedRuns: deps.temporal
      ? runWorkflowActivities({
          db: deps.db,
          workflows: temporalRunWorkflows(deps.temporal.client, deps.temporal.taskQueue),
        }).reattachStrandedRuns
      : async () => ({ reattached: [] }),
    beginCheck: machines.beginCheck,
    finishCheck: machines.finishCheck,
    expireReservation: machines.expireReservation,
    runCheckCommand: heartbeating(machines.runCheckCommand),
    ...qaSteps,
  });
}
