import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { markOccupancyLive, occupancyUnitsOf, releaseTerminalOccupancy } from '../../db/occupancy';
import { projectById } from '../../db/projects';
import { memberLabelsOf, membersOf } from '../../db/runMembers';
import { environmentById, executingRunIds, runById, supersededRunsSince } from '../../db/runs';
import { refusal } from '../../domain/errors';

/** What a run's workflow is started with: its walk, and the labels operators filter by. */
export interface RunWalk {
  run_id: string;
  walk: number;
  project: string;
  member_items: string[];
  occupancy_units: string[];
  /** The origin (occupancy unit) of the run's own target environment: its YokeTargetOrigin. */
  target_origin: string;
}

export type WorkflowAttachment = 'running' | 'started' | 'replaced';
/**
 * What repair did: the workflow it found or started, or (a terminal run) the occupancy it
 * released, or (a run taken over whose workflow still ran) told that workflow to end superseded.
 */
export type Repair = WorkflowAttachment | 'occupancy_released' | 'superseded';

/**
 * T2: how long after a takeover the reconciler still looks for the predecessor's workflow. The
 * workflow re-reads its run at least every 10 minutes and then ends superseded by itself; the
 * reconciler only makes that prompt once Temporal answers again.
 */
export const SUPERSEDED_WORKFLOW_WINDOW_MS = 24 * 60 * 60 * 1000;

/** A run's workflow as Temporal reports it: status null when there is none. */
export interface RunWorkflowView {
  workflow_id: string;
  status: string | null;
  walk: number | null;
}

/** The port to the run workflows (temporal/runWorkflows.ts implements it). */
export interface RunWorkflows {
  /** Starts the walk's workflow unless it runs; replaces a workflow of an older walk. */
  ensure(run: RunWalk): Promise<WorkflowAttachment>;
  describe(runId: string): Promise<RunWorkflowView>;
  workflowId(runId: string): string;
  /** T2: tells the run's workflow it was taken over (the takeover's own signal may have been lost). */
  supersede(runId: string, successorRunId: string): Promise<void>;
  /** Tells the run's workflow its members now (its YokeItem search attribute); an ended one needs nothing. */
  membersChanged(runId: string, labels: { items: string[]; version: number }): Promise<void>;
}

/**
 * After add-item or remove-item committed on an executing run: its workflow's YokeItem search
 * attribute follows the membership (a created run's workflow starts with its members, so it
 * needs no message, and Temporal is not asked).
 */
export async function relabelRunMembers(
  db: Kysely<Database>,
  runId: string,
  membersChanged: RunWorkflows['membersChanged'],
): Promise<{ relabelled: boolean }> {
  const labels = await memberLabelsOf(db, runId);
  if (labels?.status !== 'executing') return { relabelled: false };
  await membersChanged(runId, { items: labels.items, version: labels.version });
  return { relabelled: true };
}

export interface Reattachment {
  run_id: string;
  walk: number;
  workflow_id: string;
  workflow: Repair;
}

/**
 * The reconciler (run by the sweep schedule) and `deployment-runs repair`: an executing run
 * whose workflow is not running, because a CLI died between its execute commit and the
 * workflow start or a workflow ended abnormally, gets one.
 */
export function runWorkflowActivities(deps: { db: Kysely<Database>; workflows: RunWorkflows }) {
  const { db } = deps;

  async function walkOf(runId: string): Promise<RunWalk> {
    const run = await runById(db, runId);
    const [project, units, target] = await Promise.all([
      projectById(db, run.project_id),
      occupancyUnitsOf(db, runId),
      environmentById(db, run.target_environment_id),
    ]);
    return {
      run_id: run.run_id,
      walk: run.walk,
      project: project.name,
      member_items: (await membersOf(db, run.run_id)).map((m) => m.item),
      occupancy_units: units,
      target_origin: target.occupancy_unit,
    };
  }

  /** T2: a run taken over whose workflow still runs is told again, so it ends superseded now. */
  async function endSupersededWorkflow(run: {
    run_id: string;
    walk: number;
    superseded_by_run_id: string;
  }): Promise<Reattachment | null> {
    const wf = await deps.workflows.describe(run.run_id);
    if (wf.status !== 'RUNNING') return null;
    await deps.workflows.supersede(run.run_id, run.superseded_by_run_id);
    return { run_id: run.run_id, walk: run.walk, workflow_id: wf.workflow_id, workflow: 'superseded' };
  }

  async function reattachRun(input: { runId: string }): Promise<Reattachment> {
    const run = await runById(db, input.runId);
    if (run.superseded_by_run_id && run.status !== 'executing') {
      const told = await endSupersededWorkflow({ ...run, superseded_by_run_id: run.superseded_by_run_id });
      if (told) return told;
    }
    await markOccupancyLive(db, run.run_id);
    if (run.status !== 'executing' && run.status !== 'created' && !run.occupancy_released_at) {
      // A terminal run never occupies: release what a fault left behind (yoke doctor names it).
      await releaseTerminalOccupancy(db, run.run_id);
      return {
        run_id: run.run_id,
        walk: run.walk,
        workflow_id: deps.workflows.workflowId(run.run_id),
        workflow: 'occupancy_released',
      };
    }
    if (run.status !== 'executing') {
      throw refusal(
        'run_not_executing',
        `run ${run.run_id} is ${run.status}; only an executing run has a workflow to repair`,
        {
          recovery:
            run.status === 'created'
              ? `execute it: yoke deployment-runs execute ${run.run_id}`
              : `see it: yoke deployment-runs get ${run.run_id}`,
          details: { run_id: run.run_id, status: run.status },
        },
      );
    }
    const walk = await walkOf(run.run_id);
    const workflow = await deps.workflows.ensure(walk);
    return { run_id: run.run_id, walk: walk.walk, workflow_id: deps.workflows.workflowId(run.run_id), workflow };
  }

  /**
   * Every executing run gets a running workflow, and every recently taken-over run's workflow
   * that still runs is told to end superseded (T2); returns the runs that needed either.
   */
  async function reattachStrandedRuns(): Promise<{ reattached: Reattachment[] }> {
    const reattached: Reattachment[] = [];
    for (const run_id of await executingRunIds(db)) {
      try {
        const r = await reattachRun({ runId: run_id });
        if (r.workflow === 'started' || r.workflow === 'replaced') reattached.push(r);
      } catch (err) {
        // It ended between the list and the look: nothing to reattach.
        if ((err as { code?: string }).code !== 'run_not_executing') throw err;
      }
    }
    for (const r of await supersededRunsSince(db, new Date(Date.now() - SUPERSEDED_WORKFLOW_WINDOW_MS))) {
      const told = await endSupersededWorkflow(r);
      if (told) reattached.push(told);
    }
    return { reattached };
  }

  return { reattachRun, reattachStrandedRuns };
}

export type RunWorkflowActivities = ReturnType<typeof runWorkflowActivities>;
