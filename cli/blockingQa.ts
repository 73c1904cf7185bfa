import type { QaPendingReport } from '../activities/qa/pending';
import { refusal, YokeError } from '../domain/errors';
import type { CommandContext } from './context';

/** Bounded backoff between re-reads of a blocking-QA read that ran past its deadline (Q5). */
const BACKOFF_MS = [200, 400, 800];

/**
 * Q5: the driver's blocking-QA read. A read answering read_deadline_exceeded is re-read after
 * a short bounded backoff; when every attempt expires the check says `could not evaluate
 * blocking QA` with the rerun recovery, a refusal (exit 1), never a usage error. `rerun` is the
 * command that read it (advance, watch, qa-pending), so the recovery repeats what recovers.
 */
export async function readBlockingQa(
  ctx: CommandContext,
  runId: string,
  stage: string | null,
  rerun: string,
): Promise<QaPendingReport> {
  const { readQaPending } = await import('../activities/qa/pending');
  const deadlineMs = ctx.config.qaReadDeadlineMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await readQaPending(ctx.db, { runId, stage }, deadlineMs);
    } catch (err) {
      if (!(err instanceof YokeError) || err.code !== 'read_deadline_exceeded') throw err;
      if (attempt < BACKOFF_MS.length) {
        await new Promise((r) => setTimeout(r, BACKOFF_MS[attempt]));
        continue;
      }
      throw refusal(
        'read_deadline_exceeded',
        `could not evaluate blocking QA of run ${runId}: ${attempt + 1} reads ran past their ${deadlineMs} ms deadline`,
        {
          recovery: `rerun: ${rerun} (or raise YOKE_QA_READ_DEADLINE_MS)`,
          details: { run_id: runId, attempts: attempt + 1, deadline_ms: deadlineMs, rerun },
        },
      );
    }
  }
}
