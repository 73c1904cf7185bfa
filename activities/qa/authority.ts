import type { RunRow, SessionRow } from '../../db/database';
import type { Executor } from '../../db/pool';
import { runAuthorityFacts } from '../../db/runs';
import { requireLiveSession } from '../../db/sessions';
import { refusal } from '../../domain/errors';

/**
 * R1 for approvals and waivers: the run's live driver may approve a stage or waive QA; any
 * other session needs a live steering seat on the run's project. A live driver elsewhere is
 * named (run_driven_elsewhere); with no live driver the seat is what is missing
 * (steering_seat_required).
 */
export async function requireRunAuthority(
  db: Executor,
  run: RunRow,
  sessionId: string,
  freshMs: number,
  doing: string,
): Promise<SessionRow> {
  const session = await requireLiveSession(db, sessionId);
  const { driver_live, seat, project } = await runAuthorityFacts(db, run, sessionId, freshMs);
  if ((run.driver_session_id === sessionId && driver_live) || seat) return session;
  if (run.driver_session_id && driver_live) {
    throw refusal(
      'run_driven_elsewhere',
      `run ${run.run_id} is driven by session ${run.driver_session_id}; session ${sessionId} cannot ${doing}`,
      {
        recovery: `ask the driver (${run.driver_session_id}) to ${doing}, or take the steering seat of ${project}: yoke claims steering take --project ${project} --session ${sessionId}`,
        details: { run_id: run.run_id, driver_session_id: run.driver_session_id, session_id: sessionId },
      },
    );
  }
  throw refusal(
    'steering_seat_required',
    `run ${run.run_id} has no live driver and session ${sessionId} holds no steering seat on ${project}, so it cannot ${doing}`,
    {
      // A created run has no driver to heartbeat (R1): executing it is what attaches one.
      recovery: `drive the run (${run.status === 'created' ? `yoke deployment-runs execute ${run.run_id}` : `yoke deployment-runs heartbeat ${run.run_id}`}) or take the seat: yoke claims steering take --project ${project} --session ${sessionId}`,
      details: { run_id: run.run_id, session_id: sessionId, project },
    },
  );
}
