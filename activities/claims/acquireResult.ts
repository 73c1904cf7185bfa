import type { ClaimView } from '../../db/claims';

/** What every take of a claim answers (acquire.ts, and the QA_HOST take in testMachineTake.ts). */
export interface AcquireResult {
  claim: ClaimView;
  /** True when the caller already held it (same session, or C4 the owning item re-entering). */
  reentered: boolean;
  /** W7: the caller's reserved turn in the waiting line was consumed by this acquire. */
  consumed_reservation: boolean;
  warnings: string[];
}

/** W4: a refused QA_HOST acquire joins the waiting line with the command that resumes it. */
export interface JoinRequest {
  resumeCommand: string;
  qaPlanExecutionId?: number;
  /** W6: an execution taking its aborted predecessor's place joins with that queued_at. */
  queuedAt?: string;
}
