/**
 * U1: compute_schedule. One computation says who staffs which item; the board, fleet and
 * frontier views are cut from its answer and never compute their own.
 *
 * Explicit staffing follows pinned workflow bindings: a live run's members are staffed by
 * the session attached as the driver of its workflow (deployment-run/<runId>) while that
 * attachment is fresh; without a live driver, by the project's steering seat (R1's fallback).
 * Only work outside a pinned binding is staffed by whoever claims it.
 */
export type StaffingBasis = 'pinned_run_driver' | 'steering_fallback' | 'item_claim' | 'epic_task_claim';

export interface ScheduleInput {
  now: string;
  driverFreshMs: number;
  /** Live sessions. */
  sessions: { session_id: string; actor_id: string; machine_id: string | null; project: string | null }[];
  /** Live claims of those sessions. */
  claims: {
    claim_id: number;
    session_id: string;
    kind: string;
    item: string | null;
    project: string | null;
    claimed_at: string;
  }[];
  /** Runs not yet terminal. */
  runs: {
    run_id: string;
    project: string;
    status: string;
    driver_session_id: string | null;
    driver_heartbeat_at: string | null;
    members: string[];
  }[];
  /** Items the views may show; `delivered` items leave the frontier. */
  items: { item: string; project: string; delivered: boolean }[];
}

export interface Staffing {
  item: string;
  project: string;
  session_id: string | null;
  basis: StaffingBasis | null;
  run_id: string | null;
}

export interface Schedule {
  staffing: Staffing[];
  /** Items each live session staffs, in item order. */
  by_session: Record<string, string[]>;
  /** Unstaffed, undelivered items: what nobody is working on yet. */
  frontier: { item: string; project: string }[];
}

function itemOrder(a: string, b: string): number {
  const [pa, na] = a.split('-');
  const [pb, nb] = b.split('-');
  return (pa ?? '').localeCompare(pb ?? '') || Number(na) - Number(nb);
}

/** run-9 before run-10: by number, not as text. */
function runOrder(a: string, b: string): number {
  const n = (id: string) => Number(id.slice(id.lastIndexOf('-') + 1));
  return n(a) - n(b) || a.localeCompare(b);
}

export function computeSchedule(input: ScheduleInput): Schedule {
  const live = new Set(input.sessions.map((s) => s.session_id));
  const now = Date.parse(input.now);
  const byTime = [...input.claims].sort((a, b) => a.claimed_at.localeCompare(b.claimed_at) || a.claim_id - b.claim_id);
  const seatOf = new Map<string, string>();
  const itemHolder = new Map<string, string>();
  const taskHolder = new Map<string, string>();
  for (const c of byTime) {
    if (!live.has(c.session_id)) continue;
    if (c.kind === 'steering' && c.project && !seatOf.has(c.project)) seatOf.set(c.project, c.session_id);
    if (c.kind === 'item' && c.item && !itemHolder.has(c.item)) itemHolder.set(c.item, c.session_id);
    if (c.kind === 'epic_task' && c.item && !taskHolder.has(c.item)) taskHolder.set(c.item, c.session_id);
  }
  // A live driver's binding wins over the steering seat's fallback whichever run sorts first,
  // and among runs of one basis an executing run's over a created one's, then the older run's.
  type Binding = { run: ScheduleInput['runs'][number]; session_id: string | null; basis: StaffingBasis };
  const bindings = input.runs.flatMap((run): Binding[] => {
    const driverLive =
      run.driver_session_id !== null &&
      live.has(run.driver_session_id) &&
      run.driver_heartbeat_at !== null &&
      now - Date.parse(run.driver_heartbeat_at) <= input.driverFreshMs;
    const seat = seatOf.get(run.project) ?? null;
    if (driverLive) return [{ run, session_id: run.driver_session_id, basis: 'pinned_run_driver' }];
    return seat ? [{ run, session_id: seat, basis: 'steering_fallback' }] : [];
  });
  bindings.sort(
    (a, b) =>
      Number(b.basis === 'pinned_run_driver') - Number(a.basis === 'pinned_run_driver') ||
      Number(b.run.status !== 'created') - Number(a.run.status !== 'created') ||
      runOrder(a.run.run_id, b.run.run_id),
  );
  const pinned = new Map<string, { run_id: string; session_id: string | null; basis: StaffingBasis | null }>();
  for (const { run, session_id, basis } of bindings)
    for (const item of run.members) if (!pinned.has(item)) pinned.set(item, { run_id: run.run_id, session_id, basis });
  const projects = new Map<string, { project: string; delivered: boolean }>();
  for (const i of input.items) projects.set(i.item, { project: i.project, delivered: i.delivered });
  for (const c of input.claims)
    if (c.item && !projects.has(c.item)) projects.set(c.item, { project: c.project ?? '', delivered: false });
  for (const r of input.runs)
    for (const m of r.members) if (!projects.has(m)) projects.set(m, { project: r.project, delivered: false });

  const staffing: Staffing[] = [];
  const frontier: Schedule['frontier'] = [];
  const by_session: Record<string, string[]> = {};
  for (const item of [...projects.keys()].sort(itemOrder)) {
    const { project, delivered } = projects.get(item)!;
    const pin = pinned.get(item);
    let row: Staffing;
    if (pin) row = { item, project, session_id: pin.session_id, basis: pin.basis, run_id: pin.run_id };
    else if (itemHolder.has(item))
      row = { item, project, session_id: itemHolder.get(item)!, basis: 'item_claim', run_id: null };
    else if (taskHolder.has(item))
      row = { item, project, session_id: taskHolder.get(item)!, basis: 'epic_task_claim', run_id: null };
    else row = { item, project, session_id: null, basis: null, run_id: null };
    staffing.push(row);
    if (row.session_id) (by_session[row.session_id] ??= []).push(item);
    else if (!delivered) frontier.push({ item, project });
  }
  return { staffing, by_session, frontier };
}

/** The fleet view: live sessions per machine, with what each staffs. */
export function fleetView(schedule: Schedule, sessions: ScheduleInput['sessions']) {
  const machines = new Map<
    string,
    { session_id: string; actor_id: string; project: string | null; staffing: string[] }[]
  >();
  for (const s of [...sessions].sort((a, b) => a.session_id.localeCompare(b.session_id))) {
    const m = s.machine_id ?? '(no machine)';
    machines.set(m, [
      ...(machines.get(m) ?? []),
      {
        session_id: s.session_id,
        actor_id: s.actor_id,
        project: s.project,
        staffing: schedule.by_session[s.session_id] ?? [],
      },
    ]);
  }
  return [...machines.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([machine_id, list]) => ({ machine_id, sessions: list }));
}
