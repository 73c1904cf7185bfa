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
 * With `context`, the same statement reads execute's context once the lock is granted
 * (`yoke_execute_context` reads on a snapshot of its own, migration 0022).
 */
export async function lockRunForSession(
  db: Executor,
  sessionId: string,
  runId: string,
): Promise<{ sessionId: string; run: RunRow }>;
export async function lockRunForSession(
  db: Executor,
  sessionId: string,
  runId: string,
  options: { context: true },
): Promise<{ sessionId: string; run: RunRow; context: ExecuteContext }>;
export async function lockRunForSession(
  db: Executor,
  sessionId: string,
  runId: string,
  options: { context?: boolean } = {},
): Promise<{ sessionId: string; run: RunRow; context?: ExecuteContext }> {
  const context = options.context
    ? sql`, yoke_execute_context(r.run_id, r.project_id, r.flow_id) AS execute_context`
    : sql``;
  const { rows } = await prepared(sql<
    Partial<RunRow> & {
      session_found: string | null;
      session_ended_at: Date | null;
      session_terminated_at: Date | null;
      session_end_reason: SessionRow['end_reason'];
      execute_context?: ContextRead;
    }
  >`
    SELECT s.session_id AS session_found, s.ended_at AS session_ended_at, s.terminated_at AS session_terminated_at,
           s.end_reason AS session_end_reason, r.*${context}
      FROM (SELECT 1) AS one
      LEFT JOIN sessions s ON s.session_id = ${sessionId}::text
      LEFT JOIN LATERAL (SELECT * FROM deployment_runs x WHERE x.run_id = ${runId}::text FOR UPDATE) r ON true`).execute(
    db,
  );
  const { session_found, session_ended_at, session_terminated_at, session_end_reason, execute_context, ...run } =
    rows[0]!;
  assertLiveSession(
    sessionId,
    session_found === null
      ? undefined
      : { ended_at: session_ended_at, terminated_at: session_terminated_at, end_reason: session_end_reason },
  );
  if (run.run_id === null || run.run_id === undefined) throw runNotFound(runId);
  return { sessionId, run: run as RunRow, ...(options.context ? { context: contextOf(execute_context!) } : {}) };
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
  /** The run's target and every stage target of its flow and of the flow it pinned. */
  environments: Pick<EnvironmentRow, 'environment_id' | 'name' | 'url' | 'tier' | 'occupancy_unit'>[];
  /** In item_id order. */
  members: ExecuteMember[];
  /** The members' obligations, in item_id and case_key order. */
  obligations: ObligationRow[];
}

/**
 * One read of everything execute decides from: the project, the flow, the environments, the
 * members with their items and their obligations (`yoke_execute_context`, migration 0022).
 * The caller holds the run's row lock, so the members cannot change under it.
 */
export async function executeContext(
  db: Executor,
  run: { run_id: string; project_id: number; flow_id: number },
): Promise<ExecuteContext> {
  const { rows } = await prepared(sql<{ context: ContextRead }>`
    SELECT yoke_execute_context(${run.run_id}::text, ${run.project_id}::integer, ${run.flow_id}::integer) AS context`).execute(
    db,
  );
  return contextOf(rows[0]!.context);
}

/** What `yoke_execute_context` answers (migration 0022_execute_targeted_reads): each member carries its obligations. */
type ContextRead = Omit<ExecuteContext, 'members' | 'obligations'> & {
  members: (ExecuteMember & { obligations: ObligationRow[] })[];
};

const contextOf = ({ members, ...read }: ContextRead): ExecuteContext => ({
  ...read,
  members: members.map(({ obligations: _, ...member }) => member),
  obligations: members.flatMap((m) => m.obligations),
});

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
 * O2 and the freeze with the transition, in one round trip (`yoke_execute`, migration 0022):
 * the origin locks and the occupancy check as `lockOrigins`; then, when no other run holds an
 * origin, the selections written back, the roll-ups derived again (a row that no longer
 * belongs is retracted manual), the occupancy, the stage rows, the run executing under its
 * driver with a new walk, and the DeploymentRunExecuting event. Returns the holder (nothing
 * written) or the new walk.
 */
export async function executeUnlessOccupied(
  db: Executor,
  w: ExecutingWrite,
): Promise<{ holder: OriginHolder } | { walk: number }> {
  const { rows } = await prepared(sql<OriginHolder & { walk: number | null }>`
    SELECT * FROM yoke_execute(${w.runId}::text, ${w.units}::text[], ${w.sessionId}::text, ${w.projectId}::integer,
                               ${JSON.stringify(w.selections)}::jsonb, ${JSON.stringify(w.rollUps)}::jsonb,
                               ${w.rollUpPatterns}::text[], ${JSON.stringify(w.stages)}::jsonb,
                               ${JSON.stringify(w.carriedWork)}::jsonb,
                               ${JSON.stringify(w.pinnedFlow)}::jsonb)`).execute(db);
  const { walk, ...holder } = rows[0]!;
  return walk === null ? { holder } : { walk };
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
