import type { ClaimView } from '../activities/claims';
import { table } from './output';

/** How claims read in a terminal: one row each, the operator key or target first. */
export function claimTarget(c: ClaimView): string {
  if (c.key) return c.key;
  if (c.target_kind === 'steering') return `steering ${c.project ?? ''}`.trim();
  if (c.target_kind === 'item') return c.item ?? `item ${c.item_id}`;
  if (c.target_kind === 'epic_task') return `${c.item ?? `item ${c.item_id}`} ${String(c.scope.task)}`;
  if (c.target_kind === 'process') return `⚙ ${String(c.scope.process_key)}`;
  if (c.target_kind === 'path_claim') return `📁 ${String(c.scope.path)}${c.item ? ` (${c.item})` : ''}`;
  if (c.target_kind === 'strategy_doc_claim') return `🛞 ${c.project ?? ''} · ${String(c.scope.document)}`;
  return `${c.target_kind}:${JSON.stringify(c.scope)}`;
}

export function claimsTable(claims: ClaimView[]): string {
  return table(
    ['CLAIM', 'TARGET', 'KIND', 'PROJECT', 'ITEM', 'SESSION', 'CLAIMED', 'RELEASED', 'REASON'],
    claims.map((c) => [
      c.claim_id,
      claimTarget(c),
      c.target_kind + (c.sticky ? ' (sticky)' : ''),
      c.project,
      c.item,
      c.session_id,
      c.claimed_at,
      c.released_at,
      c.release_reason,
    ]),
  );
}

export function claimLine(verb: string, c: ClaimView): string {
  return `${verb} claim ${c.claim_id}: ${claimTarget(c)} (${c.target_kind}${c.sticky ? ', sticky' : ''}) held by session ${c.session_id} since ${c.claimed_at}`;
}

interface Take {
  claim: ClaimView;
  reentered: boolean;
}

/** How a take that may re-enter reads: `holding` when the session already held it. */
export const takeLine =
  (verb: string) =>
  (r: Take): string =>
    claimLine(r.reentered ? 'holding' : verb, r.claim);

/** A take's JSON: the claim with `reentered`. */
export const takeJson = (r: Take) => ({ ...r.claim, reentered: r.reentered });
