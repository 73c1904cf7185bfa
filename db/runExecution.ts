import { sql } from 'kysely';
import type { ItemStatus } from '../domain/completion';
import type { CarriedWorkItem, EnvironmentRow, FlowRow, PinnedFlow, RunRow, SessionRow } from './database';
import { prepared, type Executor } from './pool';
import { runNotFound, type ObligationRow } from './runs';
import { assertLiveSession } from './sessions';

/**
 * `deployment-runs execute` (O1-O3, D5, issue 16): what the transition reads and writes, in a
 * fixed number of statements whatever the number of members, environments or occupied origins.
 */

/**
 * The acting session must be live, and the run is locked for it, in one statement: the
 * session's refusals first, then run_not_found, as requireLiveSession and runById say them.
 */
export async function lockRunForSession(
  db: Executor,
  sessionId: string,
  runId: string,
): Promise<{ sessionId: string; run: RunRow }> {
  const { rows } = await prepared(sql<
    Partial<RunRow> & {
      session_found: string | null;
      session_ended_at: Date | null;
      session_terminated_at: Date | null;
      session_end_reason: SessionRow['end_reason'];
    }
  >`
    SELECT s.session_id AS session_found, s.ended_at AS session_ended_at, s.terminated_at AS session_terminated_at,
           s.end_reason AS session_end_reason, r.*
      FROM (SELECT 1) AS one
      LEFT JOIN sessions s ON s.session_id = ${sessionId}::text
      LEFT JOIN LATERAL (SELECT * FROM deployment_runs x WHERE x.run_id = ${runId}::text FOR UPDATE) r ON true`).execute(
    db,
  );
  const { session_found, session_ended_at, session_terminated_at, session_end_reason, ...run } = rows[0]!;
  assertLiveSession(
    sessionId,
    session_found === null
      ? undefined
      : { ended_at: session_ended_at, terminated_at: session_terminated_at, end_reason: session_end_reason },
  );
  if (run.run_id === null || run.run_id === undefined) throw runNotFound(runId);
  return { sessionId, run: run as RunRow };
}

/** A member as execute sees it: the membership and the item fields composition judges. */
export interface ExecuteMember {
  item_id: number;
  item: string;
  project_id: number;
  status: ItemStatus;
  completion_flow_id: number | null;
  delivery_intent: 'progress' | 'final';
  requirement_selection: string[] | null;
}

export interface ExecuteContext {
  project: string;
  /** The flow's current definition (a run that pinned its flow walks the pinned stages instead). */
  flow: FlowRow;
  /** The project's completion flow, for members without their own (D8). */
  default_completion_flow_id: number | null;
  environments: Pick<EnvironmentRow, 'environment_id' | 'name' | 'url' | 'tier' | 'occupancy_unit'>[];
  /** In item_id order. */
  members: ExecuteMember[];
  /** The members' obligations, in item_id and case_key order. */
  obligations: ObligationRow[];
}

/**
 * One read of everything execute decides from: the project, the flow, the environments, the
 * members with their items and their obligations. The caller holds the run's row lock, so the
 * members cannot change under it.
 */
export async function executeContext(
  db: Executor,
  run: { run_id: string; project_id: number; flow_id: number },
): Promise<ExecuteContext> {
  const { rows } = await prepared(sql<ExecuteContext>`
    SELECT p.name AS project,
           (SELECT to_json(f) FROM flows f WHERE f.flow_id = ${run.flow_id}::integer) AS flow,
           (SELECT f.flow_id FROM flows f WHERE f.project_id = p.project_id AND f.completion_flow LIMIT 1)
             AS default_completion_flow_id,
           (SELECT coalesce(json_agg(json_build_object('environment_id', e.environment_id, 'name', e.name,
                      'url', e.url, 'tier', e.tier, 'occupancy_unit', e.occupancy_unit)), '[]')
              FROM environments e WHERE e.project_id = p.project_id) AS environments,
           (SELECT coalesce(json_agg(json_build_object('item_id', m.item_id, 'item', ip.item_prefix || '-' || i.number,
                      'project_id', i.project_id, 'status', i.status, 'completion_flow_id', i.completion_flow_id,
                      'delivery_intent', m.delivery_intent, 'requirement_selection', m.requirement_selection)
                      ORDER BY m.item_id), '[]')
              FROM deployment_run_items m
              JOIN backlog_items i ON i.item_id = m.item_id
              JOIN projects ip ON ip.project_id = i.project_id
             WHERE m.run_id = ${run.run_id}::text) AS members,
           (SELECT coalesce(json_agg(json_build_object('item_id', c.item_id, 'case_key', c.case_key,
                      'qa_phase', c.qa_phase, 'target_env', c.target_env, 'plan_id', c.plan_id, 'blocking', c.blocking,
                      'waived', c.waived, 'superseded', c.superseded, 'run_id', c.run_id,
                      'item', ip.item_prefix || '-' || i.number)
                      ORDER BY c.item_id, c.case_key), '[]')
              FROM deployment_run_items m
              JOIN item_qa_cases c ON c.item_id = m.item_id
              JOIN backlog_items i ON i.item_id = c.item_id
              JOIN projects ip ON ip.project_id = i.project_id
             WHERE m.run_id = ${run.run_id}::text) AS obligations
      FROM projects p
     WHERE p.project_id = ${run.project_id}::integer`).execute(db);
  return rows[0]!;
}

export interface OriginHolder {
  unit: string;
  run_id: string;
  current_stage: string | null;
  project: string;
}

/**
 * O2: the advisory lock of every origin (sorted by the caller), then the run holding the first
 * occupied one, in one round trip (migration 0021_execute_origins).
 */
export async function lockOrigins(db: Executor, runId: string, units: string[]): Promise<OriginHolder | undefined> {
  const { rows } = await prepared(
    sql<OriginHolder>`SELECT * FROM yoke_lock_origins(${runId}::text, ${units}::text[])`,
  ).execute(db);
  return rows[0];
}

/** A roll-up row the freeze writes (Q3): `PREFIX-N/case` at the QA stage that answers it. */
export interface RollUpRow {
  check_name: string;
  blocking: boolean;
  stage_name: string;
  plan_id: string | null;
}

export interface ExecutingWrite {
  runId: string;
  projectId: number;
  sessionId: string;
  units: string[];
  stages: { name: string; kind: string; target: string }[];
  /** Derived selections written back concrete (D5). */
  selections: { item_id: number; selection: string[] }[];
  /** The roll-ups of those selections: written, or un-retracted when they exist. */
  rollUps: RollUpRow[];
  /** `PREFIX-N/%` of each derived member: its other live roll-ups are retracted. */
  rollUpPatterns: string[];
  carriedWork: CarriedWorkItem[];
  pinnedFlow: PinnedFlow;
}

/**
 * The freeze and the transition, one statement: the selections written back, the roll-ups
 * derived again (a row that no longer belongs is retracted manual), the occupancy, the stage
 * rows, the run executing under its driver with a new walk, and the DeploymentRunExecuting
 * event. Every part touches rows no other part touches, so none needs another's effect.
 * Returns the new walk.
 */
export async function writeExecuting(db: Executor, w: ExecutingWrite): Promise<number> {
  const { rows } = await prepared(sql<{ walk: number }>`
    WITH selections AS (
           UPDATE deployment_run_items m SET requirement_selection = s.selection
             FROM jsonb_to_recordset(${JSON.stringify(w.selections)}::jsonb) AS s(item_id integer, selection jsonb)
            WHERE m.run_id = ${w.runId}::text AND m.item_id = s.item_id),
         roll_ups AS (
           INSERT INTO deployment_run_qa (run_id, check_name, source, blocking, stage_name, plan_id)
           SELECT ${w.runId}::text, q.check_name, 'item-rollup', q.blocking, q.stage_name, q.plan_id
             FROM jsonb_to_recordset(${JSON.stringify(w.rollUps)}::jsonb)
                  AS q(check_name text, blocking boolean, stage_name text, plan_id text)
           ON CONFLICT (run_id, check_name) DO UPDATE
             SET retracted_at = NULL, retraction = NULL, updated_at = clock_timestamp()),
         stale AS (
           UPDATE deployment_run_qa q
              SET retracted_at = clock_timestamp(), retraction = 'manual', updated_at = clock_timestamp()
            WHERE q.run_id = ${w.runId}::text AND q.source = 'item-rollup' AND q.retracted_at IS NULL
              AND q.check_name LIKE ANY (${w.rollUpPatterns}::text[])
              AND q.check_name <> ALL (${w.rollUps.map((r) => r.check_name)}::text[])),
         occupancy AS (
           INSERT INTO deployment_run_occupancy (run_id, unit)
           SELECT ${w.runId}::text, u FROM unnest(${w.units}::text[]) AS u
           ON CONFLICT DO NOTHING),
         stages AS (
           INSERT INTO deployment_run_stages (run_id, ordinal, name, kind, target_env)
           SELECT ${w.runId}::text, (s.ordinality - 1)::integer, s.value->>'name', s.value->>'kind', s.value->>'target'
             FROM jsonb_array_elements(${JSON.stringify(w.stages)}::jsonb) WITH ORDINALITY AS s
           ON CONFLICT DO NOTHING),
         run AS (
           UPDATE deployment_runs
              SET carried_work = ${JSON.stringify(w.carriedWork)}::jsonb, frozen_at = clock_timestamp(),
                  status = 'executing', executing_at = clock_timestamp(), occupancy_released_at = NULL,
                  terminal_at = NULL, terminal_reason = NULL,
                  driver_session_id = ${w.sessionId}::text, driver_heartbeat_at = now(),
                  pinned_flow = ${JSON.stringify(w.pinnedFlow)}::jsonb, walk = walk + 1
            WHERE run_id = ${w.runId}::text
           RETURNING walk),
         event AS (
           INSERT INTO events (event_type, project_id, session_id, payload)
           SELECT 'DeploymentRunExecuting', ${w.projectId}::integer, ${w.sessionId}::text,
                  jsonb_build_object('run_id', ${w.runId}::text, 'units', to_jsonb(${w.units}::text[]), 'walk', run.walk)
             FROM run)
    SELECT walk FROM run`).execute(db);
  return rows[0]!.walk;
}

/** R1: the caller is (again) the run's driver, its heartbeat now. */
export async function attachDriver(
  db: Executor,
  runId: string,
  sessionId: string,
): Promise<{ run_id: string; driver_session_id: string | null; driver_heartbeat_at: Date | null }> {
  return db
    .updateTable('deployment_runs')
    .set({ driver_session_id: sessionId, driver_heartbeat_at: sql`now()` })
    .where('run_id', '=', runId)
    .returning(['run_id', 'driver_session_id', 'driver_heartbeat_at'])
    .executeTakeFirstOrThrow();
}
