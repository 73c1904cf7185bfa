import { sql, type RawBuilder } from 'kysely';
import { refusal } from '../domain/errors';
import type { Obligation } from '../domain/admission';
import type { RunStatus } from '../domain/runStatuses';
import type { CreateRequest } from '../domain/canonicalRequest';
import type { DeployHostRow, EnvironmentRow, FlowRow, RunRow } from './database';
import type { Executor } from './pool';

/** Repository reads shared by run creation, membership, execution and the workflow's steps. */

export function runNotFound(runId: string) {
  // Run ids read `run-N`: a bare number is most likely one of them written short.
  const short = /^[0-9]+$/.test(runId.trim()) ? `run ids read run-N (did you mean run-${runId.trim()}?); ` : '';
  return refusal('run_not_found', `no deployment run has id ${runId}`, {
    recovery: `${short}list runs with: yoke deployment-runs list --project P`,
    details: { run_id: runId },
  });
}

export async function runById(db: Executor, runId: string, opts: { lock?: boolean } = {}): Promise<RunRow> {
  let q = db.selectFrom('deployment_runs').selectAll().where('run_id', '=', runId);
  if (opts.lock) q = q.forUpdate();
  const run = await q.executeTakeFirst();
  if (!run) throw runNotFound(runId);
  return run;
}

/** C8: the name of the project a run belongs to, in one read (a QA lease is recorded under it). */
export async function runProjectName(db: Executor, runId: string): Promise<string> {
  const row = await db
    .selectFrom('deployment_runs')
    .innerJoin('projects', 'projects.project_id', 'deployment_runs.project_id')
    .select('projects.name')
    .where('deployment_runs.run_id', '=', runId)
    .executeTakeFirst();
  if (!row) throw runNotFound(runId);
  return row.name;
}

/**
 * R1: a driver attachment is live while its heartbeat is fresh and its session has not ended:
 * ending the driver's session detaches it at once. Read by the database clock.
 */
export async function driverAttachmentLive(
  db: Executor,
  run: Pick<RunRow, 'driver_session_id' | 'driver_heartbeat_at'>,
  freshMs: number,
): Promise<boolean> {
  if (!run.driver_session_id || !run.driver_heartbeat_at) return false;
  const { rows } = await sql<{ live: boolean }>`SELECT ${driverLive(run, freshMs)} AS live`.execute(db);
  return rows[0]!.live;
}

/**
 * R1's one test of a driver attachment, as SQL (false for a run nobody drives), over the given
 * heartbeat and session: a run's values, or a listed run's columns.
 */
function driverLiveOf(heartbeatAt: RawBuilder<unknown>, sessionId: RawBuilder<unknown>, freshMs: number) {
  return sql<boolean>`coalesce(${heartbeatAt} > now() - make_interval(secs => ${freshMs / 1000})
    AND EXISTS (SELECT 1 FROM sessions d WHERE d.session_id = ${sessionId}
                  AND d.ended_at IS NULL AND d.terminated_at IS NULL), false)`;
}

function driverLive(run: Pick<RunRow, 'driver_session_id' | 'driver_heartbeat_at'>, freshMs: number) {
  return driverLiveOf(sql`${run.driver_heartbeat_at}::timestamptz`, sql`${run.driver_session_id}`, freshMs);
}

/**
 * R1 for approvals and waivers, read by the database clock: whether the run's driver attachment
 * is live (heartbeat fresh, session not ended), whether the session holds a live steering seat on the run's project, and the
 * project's name (for the refusal).
 */
export async function runAuthorityFacts(
  db: Executor,
  run: Pick<RunRow, 'driver_session_id' | 'driver_heartbeat_at' | 'project_id'>,
  sessionId: string,
  freshMs: number,
): Promise<{ driver_live: boolean; seat: boolean; project: string }> {
  // R1 (issue 9): ending the driver's session detaches it at once (driverLive, as Postgres's
  // yoke_run_refusal reads it); a fresh heartbeat of an ended session drives nothing.
  const { rows } = await sql<{ driver_live: boolean; seat: boolean; project: string }>`
    SELECT ${driverLive(run, freshMs)} AS driver_live,
           EXISTS (SELECT 1 FROM work_claims c JOIN sessions s ON s.session_id = c.session_id
                    WHERE c.target_kind = 'steering' AND c.project_id = ${run.project_id} AND c.session_id = ${sessionId}
                      AND c.released_at IS NULL AND s.ended_at IS NULL AND s.terminated_at IS NULL) AS seat,
           (SELECT name FROM projects WHERE project_id = ${run.project_id}) AS project`.execute(db);
  return rows[0]!;
}

export async function flowByName(db: Executor, projectId: number, projectName: string, name: string): Promise<FlowRow> {
  const flow = await db
    .selectFrom('flows')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (!flow) {
    throw refusal('flow_not_found', `project ${projectName} has no flow named ${name}`, {
      recovery: 'declare it in the project definition and run: yoke apply -f project.yaml',
      details: { project: projectName, flow: name },
    });
  }
  return flow;
}

export async function flowById(db: Executor, flowId: number): Promise<FlowRow> {
  return db.selectFrom('flows').selectAll().where('flow_id', '=', flowId).executeTakeFirstOrThrow();
}

/**
 * The flow a run walks: from execute on, the stages pinned on the run (a later `apply` changes
 * the project's flow, never a running run's); before execute, the flow's current definition.
 */
export async function runFlow(db: Executor, run: RunRow): Promise<FlowRow> {
  const flow = await flowById(db, run.flow_id);
  return run.pinned_flow ? { ...flow, stages: run.pinned_flow.stages } : flow;
}

function environmentNamed(db: Executor, projectId: number, name: string) {
  return db.selectFrom('environments').selectAll().where('project_id', '=', projectId).where('name', '=', name);
}

export async function environmentByName(
  db: Executor,
  projectId: number,
  projectName: string,
  name: string,
): Promise<EnvironmentRow> {
  const env = await environmentNamed(db, projectId, name).executeTakeFirst();
  if (!env) {
    throw refusal('environment_not_found', `project ${projectName} has no environment named ${name}`, {
      recovery: 'declare it in the project definition and run: yoke apply -f project.yaml',
      details: { project: projectName, environment: name },
    });
  }
  return env;
}

/** A stage's target environment: the flow was validated against the project when applied. */
export async function stageEnvironment(db: Executor, projectId: number, name: string): Promise<EnvironmentRow> {
  return environmentNamed(db, projectId, name).executeTakeFirstOrThrow();
}

export async function environmentById(db: Executor, environmentId: number): Promise<EnvironmentRow> {
  return db
    .selectFrom('environments')
    .selectAll()
    .where('environment_id', '=', environmentId)
    .executeTakeFirstOrThrow();
}

export async function deployHostByName(db: Executor, projectId: number, name: string): Promise<DeployHostRow> {
  return db
    .selectFrom('deploy_hosts')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirstOrThrow();
}

export async function environmentsOf(db: Executor, projectId: number): Promise<EnvironmentRow[]> {
  return db.selectFrom('environments').selectAll().where('project_id', '=', projectId).execute();
}

/** Every environment a run targets: its own target plus each stage's (O1). */
export function targetedEnvironmentNames(flow: FlowRow, targetName: string): string[] {
  return [...new Set([targetName, ...flow.stages.map((s) => s.target)])];
}

export type ObligationRow = Obligation & { item_id: number };

export async function obligationsOf(db: Executor, itemIds: number[]): Promise<ObligationRow[]> {
  if (itemIds.length === 0) return [];
  return db
    .selectFrom('item_qa_cases as c')
    .innerJoin('backlog_items as i', 'i.item_id', 'c.item_id')
    .innerJoin('projects as p', 'p.project_id', 'i.project_id')
    .select([
      'c.item_id',
      'c.case_key',
      'c.qa_phase',
      'c.target_env',
      'c.plan_id',
      'c.blocking',
      'c.waived',
      'c.superseded',
      'c.run_id',
    ])
    .select(sql<string>`p.item_prefix || '-' || i.number`.as('item'))
    .where('c.item_id', 'in', itemIds)
    .orderBy('c.item_id')
    .orderBy('c.case_key')
    .execute();
}

export interface RunListRow {
  run_id: string;
  project: string;
  flow: string;
  target: string;
  candidate_sha: string;
  status: RunStatus;
  current_stage: string | null;
  created_at: Date;
  driver_session_id: string | null;
  /** R1: whether that attachment is live (driverLiveOf), whatever the run's status: see drivesNothing. */
  driver_attachment_live: boolean;
  superseded_by_run_id: string | null;
  /** S1: executing with settling_at recorded (as `get` reads it). */
  settling: boolean;
}

/** Runs with their names, newest first, of one project or status when given. */
export async function listRunRows(
  db: Executor,
  filter: { projectId?: number; status?: RunStatus },
  freshMs: number,
): Promise<RunListRow[]> {
  let q = db
    .selectFrom('deployment_runs as r')
    .innerJoin('projects as p', 'p.project_id', 'r.project_id')
    .innerJoin('flows as f', 'f.flow_id', 'r.flow_id')
    .innerJoin('environments as e', 'e.environment_id', 'r.target_environment_id')
    .select([
      'r.run_id',
      'p.name as project',
      'f.name as flow',
      'e.name as target',
      'r.candidate_sha',
      'r.status',
      'r.current_stage',
      'r.created_at',
      'r.driver_session_id',
      driverLiveOf(sql.ref('r.driver_heartbeat_at'), sql.ref('r.driver_session_id'), freshMs).as(
        'driver_attachment_live',
      ),
      'r.superseded_by_run_id',
      sql<boolean>`r.status = 'executing' AND r.settling_at IS NOT NULL`.as('settling'),
    ])
    .orderBy('r.created_at', 'desc');
  if (filter.projectId !== undefined) q = q.where('r.project_id', '=', filter.projectId);
  if (filter.status) q = q.where('r.status', '=', filter.status);
  return q.execute();
}

/**
 * T2: runs taken over (superseded_by_run_id) that ended since `since`: their workflows must
 * have ended superseded. Older ones are past every workflow's own safety re-read.
 */
export async function supersededRunsSince(
  db: Executor,
  since: Date,
): Promise<{ run_id: string; walk: number; superseded_by_run_id: string }[]> {
  const rows = await db
    .selectFrom('deployment_runs')
    .select(['run_id', 'walk', 'superseded_by_run_id'])
    .where('superseded_by_run_id', 'is not', null)
    .where('terminal_at', '>', since)
    .orderBy('run_id')
    .execute();
  return rows.map((r) => ({ run_id: r.run_id, walk: r.walk, superseded_by_run_id: r.superseded_by_run_id! }));
}

/** The runs executing now (the reconciler gives each a workflow). */
export async function executingRunIds(db: Executor): Promise<string[]> {
  const rows = await db.selectFrom('deployment_runs').select('run_id').where('status', '=', 'executing').execute();
  return rows.map((r) => r.run_id);
}

/** I1: the run a project's idempotency key created, with the request it was created from. */
export async function runByIdempotencyKey(
  db: Executor,
  projectId: number,
  key: string,
): Promise<Pick<RunRow, 'run_id' | 'status' | 'create_request'> | undefined> {
  return db
    .selectFrom('deployment_runs')
    .select(['run_id', 'status', 'create_request'])
    .where('project_id', '=', projectId)
    .where('create_idempotency_key', '=', key)
    .executeTakeFirst();
}

export interface NewRun {
  project_id: number;
  flow_id: number;
  target_environment_id: number;
  candidate_sha: string;
  create_idempotency_key: string | null;
  create_request: CreateRequest;
  created_by_session_id: string | null;
}

/** Inserts a created run under the next run number (`run-N`). */
export async function insertCreatedRun(db: Executor, run: NewRun): Promise<RunRow> {
  const { rows } = await sql<{ n: string }>`SELECT nextval('deployment_run_numbers') AS n`.execute(db);
  return db
    .insertInto('deployment_runs')
    .values({ ...run, run_id: `run-${rows[0]!.n}`, create_request: JSON.stringify(run.create_request) })
    .returningAll()
    .executeTakeFirstOrThrow();
}
