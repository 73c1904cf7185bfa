import { sql, type RawBuilder } from 'kysely';
import type { ClaimRow } from './database';
import type { NewClaimInput } from './claims';
import type { Executor } from './pool';

/**
 * C3: the exclusivity unit of a claim as a predicate over `work_claims` rows aliased `alias`:
 * the same columns its kind's unique partial index covers (migrations 0001, 0009), so a
 * holder lookup uses that index. The kind is written as a literal, not a parameter: a
 * prepared statement's generic plan can only use the partial index whose predicate it can
 * prove, and without it Postgres planned the one-statement acquire afresh on every call.
 */
export function unitMatch(claim: NewClaimInput, alias = 'work_claims'): RawBuilder<boolean> {
  const col = (name: string) => sql.ref(`${alias}.${name}`);
  const scoped = (...fields: string[]) =>
    sql.join(
      fields.map((f) => sql`${col('scope')}->>${sql.lit(f)} = ${String(claim.scope[f])}`),
      sql` AND `,
    );
  const unit = (() => {
    switch (claim.target_kind) {
      case 'item':
        return sql`${col('item_id')} = ${claim.item_id}`;
      case 'steering':
        return sql`${col('project_id')} = ${claim.project_id}`;
      case 'qa_admission':
        return scoped('test_machine');
      case 'migration_serialization':
        return scoped('project_id', 'model');
      case 'route_qualification':
        return scoped('project_id', 'grant_key');
      case 'epic_task':
        return sql`${col('item_id')} = ${claim.item_id} AND ${scoped('task')}`;
      case 'process':
        return scoped('project_id', 'process_key');
      case 'path_claim':
        return scoped('project_id', 'path');
      case 'strategy_doc_claim':
        return scoped('project_id', 'document');
      default:
        return sql`${col('key')} = ${claim.key}`;
    }
  })();
  return sql<boolean>`${col('target_kind')} = ${sql.lit(claim.target_kind)} AND ${col('released_at')} IS NULL AND ${unit}`;
}

/** The live holder of the exclusivity unit a refused insert collided with. */
export async function liveHolder(db: Executor, claim: NewClaimInput): Promise<ClaimRow | undefined> {
  const { rows } = await sql<ClaimRow>`SELECT * FROM work_claims WHERE ${unitMatch(claim)}`.execute(db);
  return rows[0];
}
/** The acting session's live claims of one kind matching a scope field, for its own release. */
export async function ownLiveClaims(
  db: Executor,
  sessionId: string,
  kind: NewClaimInput['target_kind'],
  match: Record<string, string | number>,
  itemId?: number,
): Promise<ClaimRow[]> {
  let q = db
    .selectFrom('work_claims')
    .selectAll()
    .where('session_id', '=', sessionId)
    .where('target_kind', '=', kind)
    .where('released_at', 'is', null);
  for (const [field, value] of Object.entries(match)) q = q.where(sql<string>`scope->>${field}`, '=', String(value));
  if (itemId !== undefined) q = q.where('item_id', '=', itemId);
  return q.orderBy('claim_id').forUpdate().execute();
}
