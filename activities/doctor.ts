import { qaBeginCommand } from '../domain/qaPlan';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import {
  doubleClaimHolders,
  doubleOccupiedUnits,
  executingRuns,
  membersClosedTwice,
  occupyingRowsNotLive,
  reservedWaitsWithoutClaim,
  runningExecutions,
  terminalRunsOccupying,
  waitsOfEndedSessions,
} from '../db/invariants';
import { supersededRunsSince } from '../db/runs';
import { SUPERSEDED_WORKFLOW_WINDOW_MS, type RunWorkflows } from './runs/runWorkflows';

export interface Violation {
  invariant: string;
  subject: string;
  message: string;
  recovery: string;
}

/** How long a running execution may have no workflow yet: `qa begin` commits the row, then starts it. */
const BEGIN_GRACE_S = 10;

export interface DoctorReport {
  ok: boolean;
  checked: string[];
  violations: Violation[];
}

const INVARIANTS = [
  'one_live_holder_per_unit',
  'executing_run_has_live_workflow',
  'running_execution_has_live_workflow',
  'superseded_run_workflow_ended',
  'no_terminal_run_occupies',
  'occupying_run_marked_live',
  'reserved_wait_has_live_claim',
  'no_member_closed_twice',
  'no_wait_of_ended_session',
] as const;

/** `yoke doctor`: the invariants that must hold whatever crashed, each violation with its way out. */
export function doctorActivities(deps: {
  db: Kysely<Database>;
  workflows: RunWorkflows;
  /** A QA plan execution's workflow status in Temporal, null when there is none. */
  executionWorkflowStatus: (executionId: number) => Promise<string | null>;
}) {
  const { db } = deps;

  /** Why the run's workflow is not live, or null when it runs the run's current walk. */
  async function workflowProblem(runId: string, walk: number): Promise<string | null> {
    const wf = await deps.workflows.describe(runId);
    if (wf.status === null) return `it has no workflow ${wf.workflow_id}`;
    if (wf.status !== 'RUNNING') return `its workflow ${wf.workflow_id} is ${wf.status.toLowerCase()}`;
    if (wf.walk !== null && wf.walk !== walk)
      return `its workflow ${wf.workflow_id} runs walk ${wf.walk}, not the run's walk ${walk}`;
    return null;
  }

  async function checkInvariants(): Promise<DoctorReport> {
    const violations: Violation[] = [];
    for (const c of await doubleClaimHolders(db)) {
      violations.push({
        invariant: 'one_live_holder_per_unit',
        subject: c.unit,
        message: `${c.unit} has ${c.claim_ids.length} live claims (${c.claim_ids.join(', ')})`,
        recovery: `release all but the rightful holder: yoke coordination-claim release --claim-id N --reason R`,
      });
    }
    for (const u of await doubleOccupiedUnits(db)) {
      violations.push({
        invariant: 'one_live_holder_per_unit',
        subject: u.unit,
        message: `origin ${u.unit} is occupied by ${u.run_ids.length} executing runs (${u.run_ids.join(', ')})`,
        recovery: `terminalize all but one: yoke deployment-runs terminalize RUN --disposition cancelled --reason R`,
      });
    }
    for (const run of await executingRuns(db)) {
      const problem = await workflowProblem(run.run_id, run.walk);
      if (problem) {
        violations.push({
          invariant: 'executing_run_has_live_workflow',
          subject: run.run_id,
          message: `run ${run.run_id} is executing but ${problem}`,
          recovery: `yoke deployment-runs repair ${run.run_id} (the sweep's reconciler does the same)`,
        });
      }
    }
    // Issue 11: a running execution whose workflow ended (terminated, lost) never moves on, and
    // keeps any machine it holds; nothing repairs it, so the way out is to end it and begin again.
    for (const e of await runningExecutions(db)) {
      const status = await deps.executionWorkflowStatus(e.execution_id);
      if (status === 'RUNNING') continue;
      // Not a violation: a workflow `qa begin` has not started yet (it commits first), or an
      // execution that ended while this read ran (its workflow completes after the row says so).
      if (status === null && e.age_s < BEGIN_GRACE_S) continue;
      if ((await runningExecutions(db, e.execution_id)).length === 0) continue;
      violations.push({
        invariant: 'running_execution_has_live_workflow',
        subject: `execution ${e.execution_id}`,
        message: `QA plan execution ${e.execution_id} (run ${e.run_id}, stage ${e.stage_name}) is running but its workflow qa-plan-execution/${e.execution_id} ${status === null ? 'does not exist' : `is ${status.toLowerCase()}`}${e.held_claim_id !== null ? `; it holds claim ${e.held_claim_id}` : ''}`,
        recovery: `yoke qa abort ${e.execution_id} --reason "workflow lost" (releases what it holds), then ${qaBeginCommand({ ...e, stage: e.stage_name })}`,
      });
    }
    // T2: a takeover whose signal was lost (Temporal unreachable) leaves the predecessor walking.
    for (const r of await supersededRunsSince(db, new Date(Date.now() - SUPERSEDED_WORKFLOW_WINDOW_MS))) {
      const wf = await deps.workflows.describe(r.run_id);
      if (wf.status !== 'RUNNING') continue;
      violations.push({
        invariant: 'superseded_run_workflow_ended',
        subject: r.run_id,
        message: `run ${r.run_id} was taken over by run ${r.superseded_by_run_id} but its workflow ${wf.workflow_id} still runs`,
        recovery: `yoke deployment-runs repair ${r.run_id} tells it to end superseded (the sweep's reconciler does the same)`,
      });
    }
    for (const r of await terminalRunsOccupying(db)) {
      violations.push({
        invariant: 'no_terminal_run_occupies',
        subject: r.run_id,
        message: `run ${r.run_id} is ${r.status} but still occupies ${r.unit}`,
        recovery: `yoke deployment-runs repair ${r.run_id} releases a terminal run's occupancy`,
      });
    }
    for (const o of await occupyingRowsNotLive(db)) {
      violations.push({
        invariant: 'occupying_run_marked_live',
        subject: o.run_id,
        message: `run ${o.run_id} occupies ${o.unit} but its occupancy row is not marked live, so execute would not see it hold the origin`,
        recovery: `yoke deployment-runs repair ${o.run_id} marks it live again`,
      });
    }
    for (const w of await reservedWaitsWithoutClaim(db)) {
      violations.push({
        invariant: 'reserved_wait_has_live_claim',
        subject: `wait ${w.wait_id}`,
        message: `wait ${w.wait_id} (session ${w.session_id} on ${w.test_machine}) is reserved but its claim ${w.claim_id ?? '(none)'} is not live`,
        recovery: `the sweep expires it; to pass the turn on now: yoke test-machine waits ${w.test_machine}, then end session ${w.session_id}`,
      });
    }
    for (const m of await membersClosedTwice(db)) {
      violations.push({
        invariant: 'no_member_closed_twice',
        subject: `${m.run_id}/${m.item}`,
        message: `member ${m.item} of run ${m.run_id} was closed ${m.closes} times`,
        recovery: `inspect the close-out events: yoke deployment-runs get ${m.run_id}`,
      });
    }
    for (const w of await waitsOfEndedSessions(db)) {
      violations.push({
        invariant: 'no_wait_of_ended_session',
        subject: `wait ${w.wait_id}`,
        message: `wait ${w.wait_id} on ${w.test_machine} is ${w.state} but its session ${w.session_id} has ended`,
        recovery: 'the stale-session sweep cancels it on its next run (npm start keeps the schedule)',
      });
    }
    return { ok: violations.length === 0, checked: [...INVARIANTS], violations };
  }

  return { checkInvariants };
}
