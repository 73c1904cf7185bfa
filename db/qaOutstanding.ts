import { sql } from 'kysely';
import type { Executor } from './pool';

/** One subject the run's QA still owes (Q5): a waiting member with its blockers, or a run obligation. */
export interface OutstandingRow {
  subject_kind: 'member' | 'run_obligation';
  subject: string;
  stage_name: string | null;
  status: 'pending' | 'failed';
  blockers: string[];
  /** Of a member: the plans with no passed execution for it (Q1), the ids its blockers name. */
  missing_plans: string[];
}

/**
 * Q5: the one reader of blocking QA, `deployment_qa_stage_outstanding`, as a single statement
 * whatever the member count. `stage` narrows it to one stage (plus run obligations naming none).
 */
export async function qaStageOutstanding(db: Executor, runId: string, stage: string | null): Promise<OutstandingRow[]> {
  const { rows } = await sql<OutstandingRow>`
    SELECT subject_kind, subject, stage_name, status, blockers, missing_plans
      FROM deployment_qa_stage_outstanding(${runId}, ${stage}::text)`.execute(db);
  return rows;
}
