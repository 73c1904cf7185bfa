import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { recordEvent } from '../../db/events';
import { insertOperatorCheck } from '../../db/runQa';
import { runById, runFlow } from '../../db/runs';
import { refusal } from '../../domain/errors';
import { qaClosedRefusal } from '../../domain/runRefusals';
import { DEFAULT_DRIVER_FRESH_MS } from '../../domain/timeouts';
import { requireRunAuthority } from './authority';

/**
 * The operator's writer of run-level QA (Q3 source `operator`), with Q6's admission rule: a
 * blocking obligation naming no stage is refused wherever the flow pins QA stages, because
 * acceptance credits only rows carrying their own stage name and it would hold the run for
 * evidence that cannot arrive.
 */
export function runObligationActivities(deps: { db: Kysely<Database>; driverFreshMs?: number }) {
  const { db } = deps;
  const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;

  async function addRunQa(input: {
    sessionId: string;
    runId: string;
    check: string;
    stage?: string;
    blocking: boolean;
  }) {
    return db.transaction().execute(async (trx) => {
      const run = await runById(trx, input.runId, { lock: true });
      await requireRunAuthority(trx, run, input.sessionId, freshMs, `add QA check ${input.check}`);
      if (run.status !== 'created' && run.status !== 'executing') {
        throw qaClosedRefusal(run, {
          live: 'add QA to a live run',
          onSuccessor: (next) =>
            `add it to the successor: yoke deployment-runs qa add ${next} --check ${input.check}${input.stage ? ` --stage ${input.stage}` : ''}${input.blocking ? '' : ' --non-blocking'}`,
        });
      }
      const flow = await runFlow(trx, run);
      const qaStages = flow.stages.filter((s) => s.kind === 'qa').map((s) => s.name);
      if (input.stage === undefined && input.blocking && qaStages.length > 0) {
        throw refusal(
          'blocking_qa_without_stage',
          `a blocking QA check bound to run ${run.run_id} must name its stage: the flow pins QA stages (${qaStages.join(', ')}) and only rows carrying their stage name are credited`,
          {
            recovery: `name the stage (--stage ${qaStages[0]}) or record it non-blocking (--non-blocking)`,
            details: { run_id: run.run_id, check: input.check, qa_stages: qaStages },
          },
        );
      }
      if (input.stage !== undefined && !qaStages.includes(input.stage)) {
        throw refusal('qa_stage_not_found', `run ${run.run_id}'s flow has no QA stage ${input.stage}`, {
          recovery: `name one of: ${qaStages.join(', ') || '(none)'}`,
          details: { run_id: run.run_id, stage: input.stage },
        });
      }
      const row = await insertOperatorCheck(trx, {
        run_id: run.run_id,
        check_name: input.check,
        blocking: input.blocking,
        stage_name: input.stage ?? null,
      });
      if (!row) {
        throw refusal('qa_check_exists', `run ${run.run_id} already has a QA check ${input.check}`, {
          recovery: `see it: yoke deployment-runs qa-pending ${run.run_id}`,
          details: { run_id: run.run_id, check: input.check },
        });
      }
      await recordEvent(trx, {
        event_type: 'DeploymentRunQaAdded',
        project_id: run.project_id,
        session_id: input.sessionId,
        payload: { run_id: run.run_id, check: input.check, stage: input.stage ?? null, blocking: input.blocking },
      });
      return {
        run_id: row.run_id,
        check_name: row.check_name,
        source: row.source,
        blocking: row.blocking,
        stage_name: row.stage_name,
        status: row.status,
        updated_at: row.updated_at.toISOString(),
      };
    });
  }

  return { addRunQa };
}
