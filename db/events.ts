import type { Executor } from './pool';

export interface NewEvent {
  event_type: string;
  project_id?: number | null;
  session_id?: string | null;
  claim_id?: number | null;
  payload: Record<string, unknown>;
}

export async function recordEvent(db: Executor, event: NewEvent): Promise<string> {
  const row = await db
    .insertInto('events')
    .values({ ...event, payload: JSON.stringify(event.payload) })
    .returning('event_id')
    .executeTakeFirstOrThrow();
  return row.event_id;
}

/** Many events in one statement (nothing when there are none). */
export async function recordEvents(db: Executor, events: NewEvent[]): Promise<void> {
  if (events.length === 0) return;
  await db
    .insertInto('events')
    .values(events.map((e) => ({ ...e, payload: JSON.stringify(e.payload) })))
    .execute();
}

export interface EventView {
  event_id: string;
  event_type: string;
  project_id: number | null;
  session_id: string | null;
  claim_id: number | null;
  payload: Record<string, unknown>;
  created_at: string;
}

export async function listEvents(db: Executor, filter: { type?: string; claimId?: number }): Promise<EventView[]> {
  let q = db.selectFrom('events').selectAll().orderBy('event_id');
  if (filter.type) q = q.where('event_type', '=', filter.type);
  if (filter.claimId !== undefined) q = q.where('claim_id', '=', filter.claimId);
  const rows = await q.execute();
  return rows.map((r) => ({ ...r, created_at: r.created_at.toISOString() }));
}
