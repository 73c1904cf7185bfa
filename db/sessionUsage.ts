import { sql } from 'kysely';
import type { Executor } from './pool';

/** Each session's per-file watermarks from its stored checkpoint (only the marks, not the accumulators). */
export async function storedWatermarks(
  db: Executor,
  sessionIds: string[],
): Promise<Map<string, Record<string, { offset: number }>>> {
  const out = new Map<string, Record<string, { offset: number }>>();
  if (sessionIds.length === 0) return out;
  const rows = await db
    .selectFrom('session_usage')
    .select(['session_id', sql<Record<string, { offset: number }> | null>`checkpoint -> 'files'`.as('files')])
    .where('session_id', 'in', sessionIds)
    .execute();
  for (const r of rows) out.set(r.session_id, r.files ?? {});
  return out;
}
