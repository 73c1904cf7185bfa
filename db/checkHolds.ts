import { sql } from 'kysely';
import type { Executor } from './pool';

/**
 * W8: whether a check's session held the machine before the check took it, recorded once
 * under the check's request id (the first answer stands on a retried begin).
 */
export async function recordCheckHold(
  db: Executor,
  hold: { request_id: string; test_machine: string; session_id: string },
): Promise<boolean> {
  const { rows } = await sql<{ held_before: boolean }>`
    WITH ins AS (
      INSERT INTO test_machine_check_holds (request_id, test_machine, session_id, held_before)
      SELECT ${hold.request_id}, ${hold.test_machine}, ${hold.session_id},
             EXISTS (SELECT 1 FROM work_claims c
                      WHERE c.target_kind = 'qa_admission' AND c.released_at IS NULL
                        AND c.session_id = ${hold.session_id}
                        AND c.scope->>'test_machine' = ${hold.test_machine})
      ON CONFLICT (request_id) DO NOTHING
      RETURNING held_before)
    SELECT held_before FROM ins
    UNION ALL
    SELECT held_before FROM test_machine_check_holds WHERE request_id = ${hold.request_id}
    LIMIT 1`.execute(db);
  return rows[0]!.held_before;
}

/** The recorded answer for a check, or false when it recorded none (a check begun before W8's record). */
export async function checkHeldBefore(db: Executor, requestId: string): Promise<boolean> {
  const { rows } = await sql<{ held_before: boolean }>`
    SELECT held_before FROM test_machine_check_holds WHERE request_id = ${requestId}`.execute(db);
  return rows[0]?.held_before ?? false;
}
