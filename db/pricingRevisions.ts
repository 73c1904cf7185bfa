import { sql, type Insertable, type Selectable } from 'kysely';
import type { PricingRevisionsTable } from './database';
import type { Executor } from './pool';

export type PricingRevisionRow = Selectable<PricingRevisionsTable>;

/** U12: every imported pricing revision. */
export async function pricingRevisionRows(db: Executor): Promise<PricingRevisionRow[]> {
  return db.selectFrom('pricing_revisions').selectAll().execute();
}

export async function pricingRevisionById(db: Executor, revisionId: string): Promise<PricingRevisionRow | undefined> {
  return db.selectFrom('pricing_revisions').selectAll().where('revision_id', '=', revisionId).executeTakeFirst();
}

/**
 * Whether the stored revision's rates equal these (JSON text), compared as jsonb: jsonb keeps
 * its own key order, so a text comparison would call an identical re-import different (U12).
 */
export async function sameRates(db: Executor, revisionId: string, rates: string): Promise<boolean> {
  const { rows } = await sql<{ same: boolean }>`
    SELECT rates = ${rates}::jsonb AS same FROM pricing_revisions WHERE revision_id = ${revisionId}`.execute(db);
  return rows[0]?.same === true;
}

/** Whether `effectiveAt` lies more than `graceSeconds` before the database's now (U12: a back-dated revision), and that now. */
export async function effectiveInThePast(
  db: Executor,
  effectiveAt: string,
  graceSeconds: number,
): Promise<{ past: boolean; now: Date }> {
  const { rows } = await sql<{ past: boolean; now: Date }>`
    SELECT ${effectiveAt}::timestamptz < now() - make_interval(secs => ${graceSeconds}) AS past, now()`.execute(db);
  return rows[0]!;
}

export async function insertPricingRevision(db: Executor, revision: Insertable<PricingRevisionsTable>): Promise<void> {
  await db.insertInto('pricing_revisions').values(revision).execute();
}
