import { DEFAULT_DRIVER_FRESH_MS } from '../domain/timeouts';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { readBoard, type BoardReadRows } from '../db/board';
import { requireProject } from '../db/projects';
import type { BoardPayload, BoardSession } from '../domain/board/payload';
import { boardMarkdown, renderBoard, type BoardRow, type RenderedBoard } from '../domain/board/render';
import { computeSchedule, fleetView, type Schedule, type ScheduleInput } from '../domain/schedule';

type ReadSession = BoardReadRows['sessions'][number];

export interface BoardOptions {
  driverFreshMs?: number;
  /** At most this many Recent Sessions; unset (the default), every one inside the window. */
  recentLimit?: number;
  recentWindowHours?: number;
}

export interface BoardResult extends RenderedBoard {
  active_sessions: (BoardRow & { staffing: string[] })[];
  schedule: Schedule;
}

/** The board payload of the sessions the view shows, with their claims. */
export function toPayload(
  rows: BoardReadRows,
  project: string | null,
  shown: (s: ReadSession) => boolean = () => true,
): BoardPayload {
  const claimsOf = new Map<string, BoardSession['claims']>();
  for (const c of rows.claims) claimsOf.set(c.session_id, [...(claimsOf.get(c.session_id) ?? []), c]);
  const session = (s: ReadSession): BoardSession => ({
    session_id: s.session_id,
    actor_id: s.actor_id,
    project: s.project,
    machine_id: s.machine_id,
    harness: s.harness,
    offered_at: s.offered_at,
    heartbeat_at: s.heartbeat_at,
    ended_at: s.ended_at,
    claims: claimsOf.get(s.session_id) ?? [],
  });
  return {
    generated_at: rows.generated_at,
    project,
    active_sessions: rows.sessions.filter((s) => s.state === 'active' && shown(s)).map(session),
    recent_sessions: rows.sessions.filter((s) => s.state === 'recent' && shown(s)).map(session),
    doc_pairings: rows.doc_pairings,
  };
}

export function scheduleInput(rows: BoardReadRows, driverFreshMs: number): ScheduleInput {
  const live = rows.sessions.filter((s) => s.state === 'active');
  const liveIds = new Set(live.map((s) => s.session_id));
  return {
    now: rows.generated_at,
    driverFreshMs,
    sessions: live.map((s) => ({
      session_id: s.session_id,
      actor_id: s.actor_id,
      machine_id: s.machine_id,
      project: s.project,
    })),
    claims: rows.claims
      .filter((c) => liveIds.has(c.session_id) && c.released_at === null)
      .map((c) => ({
        claim_id: c.claim_id,
        session_id: c.session_id,
        kind: c.kind,
        item: c.item,
        project: c.project,
        claimed_at: c.claimed_at,
      })),
    runs: rows.runs,
    items: rows.items,
  };
}

/** The schedule's answer for one project's items: their staffing, who staffs them, its frontier. */
export function scheduleOfProject(schedule: Schedule, project: string): Schedule {
  const staffing = schedule.staffing.filter((x) => x.project === project);
  const by_session: Schedule['by_session'] = {};
  for (const x of staffing) if (x.session_id) (by_session[x.session_id] ??= []).push(x.item);
  return { staffing, by_session, frontier: schedule.frontier.filter((f) => f.project === project) };
}

/**
 * The board, fleet and frontier views: each is one read (db/board.ts), one schedule
 * computation (U1) and, for the board, the one Claims column renderer (B1).
 */
export function boardActivities(deps: { db: Kysely<Database> } & BoardOptions) {
  const { db } = deps;
  const driverFreshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;

  /**
   * U1: the schedule is computed once over every live session, run and item; a --project view
   * is cut from it afterwards. Filtering before the computation would drop a session of another
   * project that staffs this project's items (a run's driver), and show its items as unstaffed.
   */
  async function read(project?: string) {
    const named = project ? await requireProject(db, project) : undefined;
    const rows = await readBoard(db, {
      projectId: named?.project_id,
      // Recent Sessions is every session ended in the window; a limit only when a caller sets one.
      recentLimit: deps.recentLimit,
      recentWindowHours: deps.recentWindowHours ?? 24,
    });
    const input = scheduleInput(rows, driverFreshMs);
    const whole = computeSchedule(input);
    const schedule = named ? scheduleOfProject(whole, named.name) : whole;
    // The view: sessions of the project or holding its claims, and the sessions staffing its items.
    const shown = (s: ReadSession) => s.in_project || (schedule.by_session[s.session_id] ?? []).length > 0;
    const shownIds = new Set(rows.sessions.filter(shown).map((s) => s.session_id));
    return {
      rows,
      payload: toPayload(rows, project ?? null, shown),
      input: { ...input, sessions: input.sessions.filter((s) => shownIds.has(s.session_id)) },
      schedule,
    };
  }

  async function board(input: { project?: string } = {}): Promise<BoardResult & { markdown: string }> {
    const { payload, schedule } = await read(input.project);
    const rendered = renderBoard(payload);
    const result: BoardResult = {
      ...rendered,
      active_sessions: rendered.active_sessions.map((r) => ({
        ...r,
        staffing: schedule.by_session[r.session_id] ?? [],
      })),
      schedule,
    };
    return { ...result, markdown: boardMarkdown(rendered) };
  }

  async function fleet(input: { project?: string } = {}) {
    const { input: si, schedule } = await read(input.project);
    return fleetView(schedule, si.sessions);
  }

  async function frontier(input: { project?: string } = {}) {
    const { schedule } = await read(input.project);
    return schedule.frontier;
  }

  return { board, fleet, frontier, readBoardPayload: read };
}
