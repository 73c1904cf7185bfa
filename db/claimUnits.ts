import { sql, type RawBuilder } from 'kysely';
import type { ClaimRow } from './database';
import type { NewClaimInput } from './claims';
import type { Executor } from './pool';
import type { TargetKind } from '../domain/claimKinds';

/** The scope fields each kind's unique partial index covers (migrations 0001, 0009). */
const SCOPE_FIELDS: Partial<Record<TargetKind, readonly string[]>> = {
  qa_admission: ['test_machine'],
  migration_serialization: ['project_id', 'model'],
  route_qualification: ['project_id', 'grant_key'],
  epic_task: ['task'],
  process: ['project_id', 'process_key'],
  path_claim: ['project_id', 'path'],
  strategy_doc_claim: ['project_id', 'document'],
};

/** The values of `claim`'s scope fields its unit compares, in the order unitPredicate compares them. */
export function unitScopeValues(claim: NewClaimInput): string[] {
  return (SCOPE_FIELDS[claim.target_kind] ?? []).map((field) => String(claim.scope[field]));
}

/** The values a unit predicate compares with: the claim's own, or a statement's placeholders. */
export interface UnitValues {
  /** The i-th of the kind's scope fields (see unitScopeValues). */
  scopeField(i: number): RawBuilder<unknown>;
  itemId(): RawBuilder<unknown>;
  projectId(): RawBuilder<unknown>;
  key(): RawBuilder<unknown>;
}

/** A claim's own values, written as parameters. */
function valuesOf(claim: NewClaimInput): UnitValues {
  const scoped = unitScopeValues(claim);
  return {
    scopeField: (i) => sql`${scoped[i]}`,
    itemId: () => sql`${claim.item_id}`,
    projectId: () => sql`${claim.project_id}`,
    key: () => sql`${claim.key}`,
  };
}

/**
 * C3: the exclusivity unit of a claim of `kind` as a predicate over `work_claims` rows aliased
 * `alias`: the same columns its kind's unique partial index covers, so a holder lookup uses
 * that index. The kind is written as a literal, not a parameter: a prepared statement's
 * generic plan can only use the partial index whose predicate it can prove, and without it
 * Postgres planned the one-statement acquire afresh on every call.
 */
export function unitPredicate(kind: TargetKind, v: UnitValues, alias = 'work_claims'): RawBuilder<boolean> {
  const col = (name: string) => sql.ref(`${alias}.${name}`);
  const scoped = sql.join(
    (SCOPE_FIELDS[kind] ?? []).map((f, i) => sql`${col('scope')}->>${sql.lit(f)} = ${v.scopeField(i)}`),
    sql` AND `,
  );
  const unit = (() => {
    switch (kind) {
      case 'item':
        return sql`${col('item_id')} = ${v.itemId()}`;
      case 'steering':
        return sql`${col('project_id')} = ${v.projectId()}`;
      case 'epic_task':
        return sql`${col('item_id')} = ${v.itemId()} AND ${scoped}`;
      default:
        return SCOPE_FIELDS[kind] ? scoped : sql`${col('key')} = ${v.key()}`;
    }
  })();
  return sql<boolean>`${col('target_kind')} = ${sql.lit(kind)} AND ${col('released_at')} IS NULL AND ${unit}`;
}

/** C3: the predicate matching the live holder of `claim`'s unit. */
export function unitMatch(claim: NewClaimInput, alias = 'work_claims'): RawBuilder<boolean> {
  return unitPredicate(claim.target_kind, valuesOf(claim), alias);
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
