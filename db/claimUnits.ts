import { sql, type RawBuilder } from 'kysely';
import type { ClaimRow } from './database';
import type { NewClaimInput } from './claims';
import type { Executor } from './pool';
import type { TargetKind } from '../domain/claimKinds';

/** The values a unit predicate compares with: the claim's own, or a statement's placeholders. */
export interface UnitValues {
  scope(): RawBuilder<unknown>;
  /** A test machine's name (its unit), as text: compared with the index's expression as it is. */
  testMachine(): RawBuilder<unknown>;
  itemId(): RawBuilder<unknown>;
  projectId(): RawBuilder<unknown>;
  key(): RawBuilder<unknown>;
}

/** A claim's own values, written as typed parameters. */
function valuesOf(claim: NewClaimInput): UnitValues {
  return {
    scope: () => sql`${JSON.stringify(claim.scope)}::jsonb`,
    testMachine: () => sql`${String(claim.scope.test_machine)}::text`,
    itemId: () => sql`${claim.item_id}::integer`,
    projectId: () => sql`${claim.project_id}::integer`,
    key: () => sql`${claim.key}::text`,
  };
}

/**
 * C3: the exclusivity unit of a claim of `kind` as a predicate over `work_claims` rows aliased
 * `alias`, written as the kind's unique partial index is, so a holder lookup uses that index: a
 * test machine's by `scope->>'test_machine'`, every other kind's by its yoke_claim_unit
 * (0054_claim_unit_index). The kind is written as a literal, not a parameter: a prepared
 * statement's generic plan can only use the partial index whose predicate it can prove, and
 * without it Postgres planned the one-statement acquire afresh on every call.
 */
export function unitPredicate(kind: TargetKind, v: UnitValues, alias = 'work_claims'): RawBuilder<boolean> {
  const col = (name: string) => sql.ref(`${alias}.${name}`);
  const unit =
    kind === 'qa_admission'
      ? sql`${col('scope')}->>'test_machine' = ${v.testMachine()}`
      : sql`yoke_claim_unit(${col('target_kind')}, ${col('scope')}, ${col('key')}, ${col('project_id')}, ${col('item_id')})
              = yoke_claim_unit(${sql.lit(kind)}, ${v.scope()}, ${v.key()}, ${v.projectId()}, ${v.itemId()})`;
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
