import { Kysely, sql } from 'kysely';

/**
 * Runs that never strand: the flow a run executes is frozen on the run at execute (the spec's
 * pinned flow), so a later `apply` cannot change what a running run does; and each execute or
 * retry starts a new walk whose number the run's workflow carries, so exactly one workflow owns
 * the cursor (a superseded walk finds its number stale and writes nothing).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE deployment_runs
      ADD COLUMN pinned_flow jsonb,
      ADD COLUMN walk integer NOT NULL DEFAULT 0;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE deployment_runs DROP COLUMN pinned_flow, DROP COLUMN walk;`.execute(db);
}
