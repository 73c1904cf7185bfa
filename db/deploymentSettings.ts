import { sql } from 'kysely';
import type { Executor } from './pool';

/**
 * The deployment's driver freshness (R1) as Postgres holds it (0032_driver_freshness):
 * yoke_run_refusal reads the same row. Undefined only before that migration.
 */
export async function readDriverFreshSeconds(db: Executor): Promise<number | undefined> {
  const row = await db.selectFrom('deployment_settings').select('driver_fresh_seconds').executeTakeFirst();
  return row?.driver_fresh_seconds;
}

/** Written by the worker (and admins): row-level security refuses everyone else. */
export async function writeDriverFreshSeconds(db: Executor, seconds: number): Promise<void> {
  await db
    .insertInto('deployment_settings')
    .values({ singleton: true, driver_fresh_seconds: seconds })
    .onConflict((oc) => oc.column('singleton').doUpdateSet({ driver_fresh_seconds: seconds, updated_at: sql`now()` }))
    .execute();
}
