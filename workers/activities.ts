import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { raisingApplicationFailures } from '../activities/failure';
import { sweepActivities } from '../activities/sweep';

/** The activities a yoke worker registers, built over its dependencies. */
export function createActivities(deps: { db: Kysely<Database> }) {
  return raisingApplicationFailures({
    ...sweepActivities(deps),
  });
}

export type SweepActivities = ReturnType<typeof sweepActivities>;
export type YokeActivities = ReturnType<typeof createActivities>;
