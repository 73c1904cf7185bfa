import { Kysely, sql } from 'kysely';
import { releaseClaimFunction } from './0043_claimperf_lean_claims';

/**
 * Issue 16, claims: the common release (`yoke_release_claim`) read its claim's machine in one
 * statement and took the machine's line lock in the next. Each statement of a plpgsql function
 * is an executor start and end of its own; the two are now one, the lock taken by a lateral call
 * on the row the lookup finds (none for a claim that is not a test machine's). The lock still
 * comes before the statement that releases, so that statement's snapshot sees every wait a join
 * inserted under the lock (activities/waitingLine.ts joinLine), and before the claim row (the
 * lock order of every path, db/waits.ts). What the function answers is unchanged, so processes
 * of the previous build keep calling it.
 */
const lookupThenLock = `SELECT x.scope->>'test_machine' INTO machine FROM public.work_claims x WHERE x.claim_id = claim AND x.target_kind = 'qa_admission';
      -- The line before the claim row: the lock order of every path (db/waits.ts).
      IF machine IS NOT NULL THEN PERFORM pg_advisory_xact_lock(hashtextextended('qa_line:' || machine, 0)); END IF;`;

const lookupAndLock = `-- The claim's machine and its line's lock in one statement. The line before the claim row: the
      -- lock order of every path (db/waits.ts).
      SELECT q.m INTO machine
        FROM (SELECT x.scope->>'test_machine' AS m FROM public.work_claims x
               WHERE x.claim_id = claim AND x.target_kind = 'qa_admission') q,
             LATERAL pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('qa_line:' || q.m, 0)) l;`;

const replaced = (from: string, to: string) => {
  if (!releaseClaimFunction.includes(from)) throw new Error('0050: yoke_release_claim is not the text expected');
  return sql.raw(releaseClaimFunction.replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION').replace(from, to));
};

export async function up(db: Kysely<any>): Promise<void> {
  await replaced(lookupThenLock, lookupAndLock).execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await replaced(lookupThenLock, lookupThenLock).execute(db);
}
