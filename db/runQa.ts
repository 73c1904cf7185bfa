import { sql, type Selectable } from 'kysely';
import type { DeploymentRunQaTable } from './database';
import type { Executor } from './pool';

/** Run-level QA rows (deployment_run_qa, Q3): flow defaults, item roll-ups and operator checks. */

export type RunQaRow = Selectable<DeploymentRunQaTable>;
type Verdict = 'passed' | 'failed' | 'waived';

/** A verdict on an open (unretracted) check; undefined when the run has no such open check. */
export async function recordRunQaVerdict(
  db: Executor,
  runId: string,
  checkName: string,
  status: Verdict,
): Promise<RunQaRow | undefined> {
  return db
    .updateTable('deployment_run_qa')
    .set({ status, updated_at: sql`clock_timestamp()` })
    .where('run_id', '=', runId)
    .where('check_name', '=', checkName)
    .where('retracted_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

function openChecks(db: Executor, runId: string) {
  return db.selectFrom('deployment_run_qa').where('run_id', '=', runId).where('retracted_at', 'is', null);
}

/** The names of the run's open checks (what a refusal offers instead). */
export async function openQaCheckNames(db: Executor, runId: string): Promise<string[]> {
  return (await openChecks(db, runId).select('check_name').execute()).map((r) => r.check_name);
}

/** The run's open checks with their status (the settlement preflight records them). */
export async function openQaStatuses(db: Executor, runId: string): Promise<Pick<RunQaRow, 'check_name' | 'status'>[]> {
  return openChecks(db, runId).select(['check_name', 'status']).execute();
}

/** Every check of the run, retracted ones too, by stage and name (the run view). */
export async function qaRowsOf(db: Executor, runId: string): Promise<RunQaRow[]> {
  return db
    .selectFrom('deployment_run_qa')
    .selectAll()
    .where('run_id', '=', runId)
    .orderBy('stage_name')
    .orderBy('check_name')
    .execute();
}

/** Whether the run holds any QA row at all. */
export async function runHasQa(db: Executor, runId: string): Promise<boolean> {
  const row = await db
    .selectFrom('deployment_run_qa')
    .select('check_name')
    .where('run_id', '=', runId)
    .executeTakeFirst();
  return !!row;
}

export interface NewRunQa {
  run_id: string;
  check_name: string;
  blocking: boolean;
  stage_name: string | null;
  plan_id: string | null;
}

/** Q3 item roll-up: a row per selected obligation; one retracted earlier is restored. */
export async function upsertRollUp(db: Executor, row: NewRunQa): Promise<void> {
  await db
    .insertInto('deployment_run_qa')
    .values({ ...row, source: 'item-rollup' })
    .onConflict((oc) =>
      oc
        .columns(['run_id', 'check_name'])
        .doUpdateSet({ retracted_at: null, retraction: null, updated_at: sql`clock_timestamp()` }),
    )
    .execute();
}

/** Q3 flow default: inserted once; an existing row of the same name stays as it is. */
export async function insertFlowDefault(db: Executor, row: NewRunQa): Promise<void> {
  await db
    .insertInto('deployment_run_qa')
    .values({ ...row, source: 'flow-default' })
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** An operator's check (Q3 source `operator`); undefined when the run already has one of that name. */
export async function insertOperatorCheck(db: Executor, row: Omit<NewRunQa, 'plan_id'>): Promise<RunQaRow | undefined> {
  return db
    .insertInto('deployment_run_qa')
    .values({ ...row, source: 'operator' })
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
}
