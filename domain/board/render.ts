import { claimsColumn, type ReservedKeycap, type RowState } from './claimsColumn';
import type { BoardPayload, BoardSession } from './payload';

/** One rendered row of either table: the session and its Claims column as keycaps. */
export interface BoardRow {
  session_id: string;
  actor_id: string;
  project: string | null;
  machine_id: string | null;
  harness: string | null;
  offered_at: string;
  ended_at: string | null;
  claims: string[];
  /** W7: the entries of `claims` that are reserved waiting-line turns, not holds. */
  reserved_claims: ReservedKeycap[];
}

export interface RenderedBoard {
  generated_at: string;
  project: string | null;
  active_sessions: BoardRow[];
  recent_sessions: BoardRow[];
}

function row(s: BoardSession, state: RowState, payload: BoardPayload): BoardRow {
  const column = claimsColumn({ state, claims: s.claims, pairings: payload.doc_pairings });
  return {
    session_id: s.session_id,
    actor_id: s.actor_id,
    project: s.project ?? null,
    machine_id: s.machine_id ?? null,
    harness: s.harness ?? null,
    offered_at: s.offered_at,
    ended_at: s.ended_at ?? null,
    claims: column.keycaps,
    reserved_claims: column.reserved,
  };
}

/** The board from one payload: both tables share the one Claims column renderer (B1). */
export function renderBoard(payload: BoardPayload): RenderedBoard {
  return {
    generated_at: payload.generated_at,
    project: payload.project ?? null,
    active_sessions: payload.active_sessions.map((s) => row(s, 'active', payload)),
    recent_sessions: payload.recent_sessions.map((s) => row(s, 'recent', payload)),
  };
}

/** Text as HTML text: markdown renderers pass raw HTML through, so `<` must not become markup. */
function html(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/**
 * One table cell. Every cell is escaped as HTML as well as markdown, keycap or not: session
 * ids, actors, machines and scopes are whatever a caller registered.
 */
function cell(text: string | null): string {
  return html(text ?? '-')
    .replace(/\\/g, '\\\\')
    .replace(/\|/g, '\\|')
    .replace(/\r?\n/g, ' ');
}

function keycap(text: string): string {
  return `<kbd>${cell(text)}</kbd>`;
}

function table(title: string, when: 'Since' | 'Ended', rows: BoardRow[]): string[] {
  const lines = [`## ${title}`, ''];
  if (rows.length === 0) return [...lines, '_none_', ''];
  lines.push(`| Session | Actor | Project | Machine | Harness | ${when} | Claims |`, '|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const time = when === 'Since' ? r.offered_at : r.ended_at;
    lines.push(
      `| ${[r.session_id, r.actor_id, r.project, r.machine_id, r.harness, time].map(cell).join(' | ')} | ${r.claims.map(keycap).join(' ')} |`,
    );
  }
  return [...lines, ''];
}

/** BOARD.md: the Active Harness Sessions and Recent Sessions tables. */
export function boardMarkdown(board: RenderedBoard): string {
  return [
    `# Board${board.project ? ` — ${html(board.project)}` : ''}`,
    '',
    `_generated ${board.generated_at}_`,
    '',
    ...table('Active Harness Sessions', 'Since', board.active_sessions),
    ...table('Recent Sessions', 'Ended', board.recent_sessions),
  ].join('\n');
}
