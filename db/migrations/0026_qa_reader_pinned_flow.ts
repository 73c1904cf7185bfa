import { Kysely, sql } from 'kysely';

/**
 * Issue 10 (Q4, Q5): the blocking-QA reader reads the stages an executed run pinned
 * (deployment_runs.pinned_flow), not the project's live flow, so an `apply` after execute no
 * longer changes which QA stages the run's members and obligations wait at. Before execute
 * nothing is pinned and the live flow's stages are read, as before.
 *
 * The function keeps 0012_qa_execution_turns's definition in every other respect: the one
 * expression naming the stages is rewritten in the stored definition, and down() writes it
 * back, so the restored function is the previous one exactly.
 */
const LIVE = 'jsonb_array_elements(f.stages)';
const PINNED = "jsonb_array_elements(coalesce(r.pinned_flow->'stages', f.stages))";

async function rewrite(db: Kysely<any>, from: string, to: string): Promise<void> {
  const { rows } = await sql<{ def: string }>`
    SELECT pg_get_functiondef('deployment_qa_stage_outstanding(text, text)'::regprocedure) AS def
  `.execute(db);
  const def = rows[0]!.def;
  const at = def.indexOf(from);
  if (at < 0 || def.indexOf(from, at + 1) >= 0)
    throw new Error(`deployment_qa_stage_outstanding: expected ${from} exactly once in its definition`);
  await sql.raw(def.replace(from, to)).execute(db);
}

export async function up(db: Kysely<any>): Promise<void> {
  await rewrite(db, LIVE, PINNED);
}

export async function down(db: Kysely<any>): Promise<void> {
  await rewrite(db, PINNED, LIVE);
}
