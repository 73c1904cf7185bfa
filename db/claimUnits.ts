import { sql } from 'kysely';
import type { ClaimRow } from './database';
import type { NewClaimInput } from './claims';
import type { Executor } from './pool';

/**
 * The live holder of the exclusivity unit of an epic task, process, path or strategy
 * document claim: the same unit each one's unique partial index guards (migration 0009).
 */
export async function liveUnitHolder(db: Executor, claim: NewClaimInput): Promise<ClaimRow | undefined> {
  let q = db
    .selectFrom('work_claims')
    .selectAll()
    .where('target_kind', '=', claim.target_kind)
    .where('released_at', 'is', null);
  const scoped = (field: string) => q.where(sql<string>`scope->>${field}`, '=', String(claim.scope[field]));
  switch (claim.target_kind) {
    case 'epic_task':
      q = q.where('item_id', '=', claim.item_id).where(sql<string>`scope->>'task'`, '=', String(claim.scope.task));
      break;
    case 'process':
      q = scoped('project_id').where(sql<string>`scope->>'process_key'`, '=', String(claim.scope.process_key));
      break;
    case 'path_claim':
      q = scoped('project_id').where(sql<string>`scope->>'path'`, '=', String(claim.scope.path));
      break;
    case 'strategy_doc_claim':
      q = scoped('project_id').where(sql<string>`scope->>'document'`, '=', String(claim.scope.document));
      break;
    default:
      throw new Error(`liveUnitHolder does not know ${claim.target_kind}`);
  }
  return q.executeTakeFirst();
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
