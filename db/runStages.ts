import { sql, type Selectable } from 'kysely';
import type { DeploymentRunStagesTable, StageStatus } from './database';
import type { Executor } from './pool';

/** The stage rows of a run (deployment_run_stages) and the cursor that walks them. */

export type StageRow = Selectable<DeploymentRunStagesTable>;

/** Each stage's ordinal, kind and status: where a walk, a hold or a takeover stands. */
export async function stageStatuses(
  db: Executor,
  runId: string,
): Promise<Pick<StageRow, 'ordinal' | 'kind' | 'status'>[]> {
  return db
    .selectFrom('deployment_run_stages')
    .select(['ordinal', 'kind', 'status'])
    .where('run_id', '=', runId)
    .execute();
}

/** Every stage row of a run, in walk order (the run view). */
export async function stagesOf(db: Executor, runId: string): Promise<StageRow[]> {
  return db.selectFrom('deployment_run_stages').selectAll().where('run_id', '=', runId).orderBy('ordinal').execute();
}

/** The stages not yet passed, in walk order (settlement waits for none). */
export async function openStages(db: Executor, runId: string): Promise<Pick<StageRow, 'name' | 'status'>[]> {
  return db
    .selectFrom('deployment_run_stages')
    .select(['name', 'status'])
    .where('run_id', '=', runId)
    .where('status', '!=', 'passed')
    .orderBy('ordinal')
    .execute();
}

/** Marks a pending stage started; undefined when it had already started (a retried step). */
export async function startStage(
  db: Executor,
  runId: string,
  ordinal: number,
  status: Extract<StageStatus, 'running' | 'waiting'>,
): Promise<{ ordinal: number } | undefined> {
  return db
    .updateTable('deployment_run_stages')
    .set({ status, started_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('ordinal', '=', ordinal)
    .where('status', '=', 'pending')
    .returning('ordinal')
    .executeTakeFirst();
}

/** Moves the run's cursor to a stage. */
export async function moveCursor(db: Executor, runId: string, stage: string, ordinal: number): Promise<void> {
  await db
    .updateTable('deployment_runs')
    .set({ current_stage: stage, cursor_ordinal: ordinal })
    .where('run_id', '=', runId)
    .execute();
}

/** Records a started stage's end; a stage already ended keeps its first outcome. */
export async function endStage(
  db: Executor,
  runId: string,
  ordinal: number,
  result: { ok: boolean; detail: string },
): Promise<void> {
  await db
    .updateTable('deployment_run_stages')
    .set({
      status: result.ok ? 'passed' : 'failed',
      finished_at: sql`clock_timestamp()`,
      detail: result.detail,
    })
    .where('run_id', '=', runId)
    .where('ordinal', '=', ordinal)
    .where('status', 'in', ['running', 'waiting'])
    .execute();
}

/** A stage found by name: whether the run has reached it. */
export async function stageByName(
  db: Executor,
  runId: string,
  name: string,
): Promise<Pick<StageRow, 'status' | 'kind'> | undefined> {
  return db
    .selectFrom('deployment_run_stages')
    .select(['status', 'kind'])
    .where('run_id', '=', runId)
    .where('name', '=', name)
    .executeTakeFirst();
}

/** The approval a waiting stage has received, if any: who approved, and the stage's detail line. */
export async function stageApproval(
  db: Executor,
  runId: string,
  ordinal: number,
): Promise<Pick<StageRow, 'approved_by_actor_id' | 'detail'> | undefined> {
  const row = await db
    .selectFrom('deployment_run_stages')
    .select(['approved_by_actor_id', 'detail'])
    .where('run_id', '=', runId)
    .where('ordinal', '=', ordinal)
    .where('approved_by_actor_id', 'is not', null)
    .executeTakeFirst();
  return row;
}

/**
 * Records an approval on an approval stage that waits for one (its columns, and the detail
 * line people read); undefined when none waits.
 */
export async function recordApproval(
  db: Executor,
  runId: string,
  stage: string,
  by: { actorId: string; sessionId: string; detail: string },
): Promise<Pick<StageRow, 'run_id' | 'name' | 'ordinal' | 'status'> | undefined> {
  return db
    .updateTable('deployment_run_stages')
    .set({
      detail: by.detail,
      approved_by_actor_id: by.actorId,
      approved_by_session_id: by.sessionId,
      approved_at: sql`clock_timestamp()`,
    })
    .where('run_id', '=', runId)
    .where('name', '=', stage)
    .where('kind', '=', 'approval')
    .where('status', '=', 'waiting')
    .returning(['run_id', 'name', 'ordinal', 'status'])
    .executeTakeFirst();
}

/** The run's approval stages and whether each was approved (the settlement preflight lists them). */
export async function approvalsOf(db: Executor, runId: string): Promise<{ stage: string; approved: boolean }[]> {
  return db
    .selectFrom('deployment_run_stages')
    .select('name as stage')
    .select(sql<boolean>`approved_by_actor_id IS NOT NULL`.as('approved'))
    .where('run_id', '=', runId)
    .where('kind', '=', 'approval')
    .execute();
}
