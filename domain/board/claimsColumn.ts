import { operatorKeyOf } from '../operatorKeys';
import type { TargetKind } from '../claimKinds';
import type { BoardClaim, DocPairing } from './payload';

/**
 * The one Claims column of the Active Harness Sessions and Recent Sessions tables (B1-B8),
 * as keycaps. Pure: the same claims and pairings always give the same keycaps.
 */

/** Kinds rendered as 🔒 keycaps: never decorations, never work claims (B3). */
const COORDINATION = new Set([
  'migration_serialization',
  'qa_admission',
  'route_qualification',
  'deploy_serialization',
]);
const PATH = 'path_claim';
const DOC_LOCK = 'strategy_doc_claim';

export type RowState = 'active' | 'recent';

export interface ClaimsColumnInput {
  state: RowState;
  claims: BoardClaim[];
  /** The pairing read; undefined for a payload recorded before it existed (B6). */
  pairings?: DocPairing[];
}

const str = (v: unknown): string => (v === null || v === undefined ? '' : String(v));

function newestFirst(a: BoardClaim, b: BoardClaim): number {
  return b.claimed_at.localeCompare(a.claimed_at) || b.claim_id - a.claim_id;
}

function oldestFirst(a: BoardClaim, b: BoardClaim): number {
  return -newestFirst(a, b);
}

function itemOf(c: BoardClaim): string {
  return c.item ?? `item ${str(c.scope.item_id)}`;
}

/** What a work claim is on, as its keycap names it (before any 📁 decoration). */
function workTarget(c: BoardClaim): string {
  switch (c.kind) {
    case 'item':
      return itemOf(c);
    case 'epic_task':
      return `${itemOf(c)} ${str(c.scope.task)}`;
    case 'process':
      return `⚙ ${str(c.scope.process_key)}`;
    case 'steering':
      return `🛞 steering ${c.project ?? str(c.scope.project_id)}`;
    default:
      return `${c.kind}:${JSON.stringify(c.scope)}`;
  }
}

function coordinationKey(c: BoardClaim): string {
  return c.key ?? operatorKeyOf(c.kind as TargetKind, c.scope) ?? `${c.kind}:${JSON.stringify(c.scope)}`;
}

function docOf(c: BoardClaim): string {
  return str(c.scope.document);
}

/** B7: repeats on one rendered target keep only the most recent row. */
function mostRecentBy(claims: BoardClaim[], target: (c: BoardClaim) => string): Map<string, BoardClaim[]> {
  const groups = new Map<string, BoardClaim[]>();
  for (const c of [...claims].sort(newestFirst)) {
    const t = target(c);
    groups.set(t, [...(groups.get(t) ?? []), c]);
  }
  return groups;
}

function declaredPaths(c: BoardClaim): number {
  const n = c.scope.declared_paths;
  return typeof n === 'number' && Number.isFinite(n) ? n : 1;
}

/**
 * Which declared path a path-claim row is. A path released and taken again is a second row on
 * the same path; it must count once (B2, B7), so the total sums distinct paths, not rows. A row
 * naming no path (a recorded payload) stands for itself.
 */
function pathIdentity(c: BoardClaim): string {
  const path = c.scope.path;
  return typeof path === 'string' ? `${str(c.scope.project_id)}:${path}` : `claim:${c.claim_id}`;
}

/** Where a path claim hangs: its item, else its process anchor, else nothing. */
function pathAnchor(c: BoardClaim): { item?: string; process?: string } {
  if (c.item) return { item: c.item };
  if (c.scope.process_key !== undefined && c.scope.process_key !== null) return { process: str(c.scope.process_key) };
  return {};
}

/**
 * W7: a waiting-line turn reserved for the session and not yet taken. It is not a hold, so it
 * does not render as one: `⏳ <key> reserved until <time>` instead of `🔒 <key>`.
 */
export interface ReservedKeycap {
  claim_id: number;
  key: string;
  reserved_until: string;
  /** The entry of the Claims column that renders it. */
  keycap: string;
}

/** An ISO time to the second, as a keycap shows it (anything else as given). */
function toSecond(iso: string): string {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$/.exec(iso);
  return m ? `${m[1]}Z` : iso;
}

function coordinationKeycap(c: BoardClaim): string {
  const item = c.item ? ` (${c.item})` : '';
  return c.reserved_until
    ? `⏳ ${coordinationKey(c)}${item} reserved until ${toSecond(c.reserved_until)}`
    : `🔒 ${coordinationKey(c)}${item}`;
}

export function renderClaimsColumn(input: ClaimsColumnInput): string[] {
  return claimsColumn(input).keycaps;
}

/** The Claims column's keycaps, and which of them are reserved turns rather than holds. */
export function claimsColumn(input: ClaimsColumnInput): { keycaps: string[]; reserved: ReservedKeycap[] } {
  // B8: released path claims and coordination claims do not appear on active-session rows.
  const claims = input.claims.filter(
    (c) => !(input.state === 'active' && c.released_at && (c.kind === PATH || COORDINATION.has(c.kind))),
  );
  const work = claims.filter((c) => c.kind !== PATH && c.kind !== DOC_LOCK && !COORDINATION.has(c.kind));
  const locks = claims.filter((c) => c.kind === DOC_LOCK);
  const paths = claims.filter((c) => c.kind === PATH);
  const coordination = claims.filter((c) => COORDINATION.has(c.kind));

  // B5: a seat names the document locks the pairing read paired with it (same session, same
  // project id; current with current, released with overlapping released). Without the
  // pairing read (B6) nothing folds: seat and lock stay separate keycaps.
  const present = new Set(claims.map((c) => c.claim_id));
  const docsOfSeat = new Map<number, number[]>();
  const covered = new Set<number>();
  for (const p of input.pairings ?? []) {
    if (!present.has(p.seat_claim_id) || !present.has(p.lock_claim_id)) continue;
    docsOfSeat.set(p.seat_claim_id, [...(docsOfSeat.get(p.seat_claim_id) ?? []), p.lock_claim_id]);
    covered.add(p.lock_claim_id);
  }
  const byId = new Map(claims.map((c) => [c.claim_id, c]));

  // B2: same-session path claims on one item (or one process) roll up into one total of the
  // paths declared; B7: a path taken again after its release is the most recent of its rows.
  const pathTotals = new Map<
    string,
    { anchor: { item?: string; process?: string }; byPath: Map<string, number>; first: BoardClaim }
  >();
  for (const c of [...paths].sort(oldestFirst)) {
    const anchor = pathAnchor(c);
    const k = anchor.item ? `i:${anchor.item}` : anchor.process !== undefined ? `p:${anchor.process}` : 'none';
    const g = pathTotals.get(k) ?? { anchor, byPath: new Map<string, number>(), first: c };
    g.byPath.set(pathIdentity(c), declaredPaths(c));
    pathTotals.set(k, g);
  }
  const totalOf = (g: { byPath: Map<string, number> }) => [...g.byPath.values()].reduce((a, n) => a + n, 0);

  const keycaps: string[] = [];
  // Work claims, oldest first, one keycap per rendered target (B7).
  const workGroups = [...mostRecentBy(work, workTarget).entries()]
    .map(([target, group]) => ({ target, latest: group[0]!, group }))
    .sort((a, b) => oldestFirst(a.latest, b.latest));
  // Which keycap carries an item's path total: the item's own work claim; an epic task only
  // when the session holds no claim on the item itself, and then the most recent task's group
  // (B1, B7), so the total stays on the same keycap when the row moves from Active to Recent.
  const decoratedBy = new Map<string, string>();
  for (const { target, latest } of [...workGroups].sort((a, b) => newestFirst(a.latest, b.latest))) {
    if (latest.kind !== 'item' && latest.kind !== 'epic_task') continue;
    const item = itemOf(latest);
    const holdsItem = work.some((c) => c.kind === 'item' && itemOf(c) === item);
    if ((latest.kind === 'item' || !holdsItem) && !decoratedBy.has(item) && pathTotals.has(`i:${item}`))
      decoratedBy.set(item, target);
  }
  const decorated = new Set(decoratedBy.keys());
  for (const { target, latest } of workGroups) {
    let text = target;
    if (latest.kind === 'steering') {
      // B7 collapses repeat seats to the most recent one, so the keycap names that seat's locks
      // only (B5); an earlier seat's locks were not held in its window.
      const docs = new Set<string>();
      for (const lockId of docsOfSeat.get(latest.claim_id) ?? []) docs.add(docOf(byId.get(lockId)!));
      if (docs.size) text += ` · ${[...docs].sort().join(', ')}`;
    }
    const item = latest.kind === 'item' || latest.kind === 'epic_task' ? itemOf(latest) : undefined;
    if (item && decoratedBy.get(item) === target) text += ` 📁${totalOf(pathTotals.get(`i:${item}`)!)}`;
    keycaps.push(text);
  }
  // Uncovered document locks (B5: a lock with no matching seat keeps its own keycap).
  const uncovered = locks.filter((c) => !covered.has(c.claim_id));
  for (const [target] of [
    ...mostRecentBy(uncovered, (c) => `🛞 ${c.project ?? str(c.scope.project_id)} · ${docOf(c)}`).entries(),
  ]
    .map(([t, g]) => [t, g[0]!] as const)
    .sort((a, b) => oldestFirst(a[1], b[1])))
    keycaps.push(target);
  // Orphan and process-anchored path claims.
  for (const g of [...pathTotals.values()].sort((a, b) => oldestFirst(a.first, b.first))) {
    if (g.anchor.item) {
      if (!decorated.has(g.anchor.item)) keycaps.push(`📁${totalOf(g)} (${g.anchor.item})`);
    } else if (g.anchor.process !== undefined) keycaps.push(`📁${totalOf(g)} (⚙ ${g.anchor.process})`);
    else keycaps.push(`📁${totalOf(g)}`);
  }
  // Coordination claims last, one per key (B3, B7), an item-owned one naming its item; a
  // reserved turn (W7) as a reservation.
  const reserved: ReservedKeycap[] = [];
  for (const latest of [...mostRecentBy(coordination, coordinationKey).values()].map((g) => g[0]!).sort(oldestFirst)) {
    const keycap = coordinationKeycap(latest);
    keycaps.push(keycap);
    if (latest.reserved_until)
      reserved.push({
        claim_id: latest.claim_id,
        key: coordinationKey(latest),
        reserved_until: latest.reserved_until,
        keycap,
      });
  }
  return { keycaps, reserved };
}
