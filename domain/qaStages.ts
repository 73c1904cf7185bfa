import { refusal, type YokeError } from './errors';

/** A stage of a flow, as far as naming its QA stages goes. */
interface NamedStage {
  name: string;
  kind: string;
}

/** A run's flow has no QA stage by this name: the refusal names the ones it has. */
export function qaStageNotFound(runId: string, stages: readonly NamedStage[], stage: string): YokeError {
  const qaStages = stages.filter((s) => s.kind === 'qa').map((s) => s.name);
  return refusal('qa_stage_not_found', `run ${runId}'s flow has no QA stage ${stage}`, {
    recovery: `name one of: ${qaStages.join(', ') || '(none)'}`,
    details: { run_id: runId, stage },
  });
}

/**
 * Q4: what holds the completing stage: a pending subject, or a blocking obligation of a QA
 * stage recorded failed (failed after its stage passed, it must not let the run deploy on). A
 * failed obligation naming no stage is settlement's: the done gate refuses it (S2).
 */
export function holdsCompletingStage(r: { status: string; stage_name: string | null }): boolean {
  return r.status === 'pending' || r.stage_name !== null;
}

/** A run obligation as the blocking-QA report and `get` show it (the report lists only blocking, open ones). */
interface RunObligation {
  check_name: string;
  stage_name: string | null;
  status: string;
  blocking?: boolean;
  retracted?: string | null;
}

/**
 * Q4 O4: a blocking run obligation recorded failed fails the QA stage that answers it, and fails
 * it again on every retry while it stands (a retry restores only what was retracted; a verdict
 * stays). One recorded failed after its stage passed holds the run before its completing stage
 * instead (Q4: unresolved, like a pending one). What to do next, as a recovery names it: once
 * the cause is fixed, record the check again (passed, or waived by the run's driver or a
 * steering seat), then retry a failed run. `stages` (the run's, in flow order) tells a stage
 * already passed; without them the stage is taken as still ahead. Null when no blocking
 * obligation of a run that can still move reads failed.
 */
export function failedQaRecovery(
  run: { run_id: string; status: string },
  obligations: readonly RunObligation[],
  stages: readonly { name: string; status: string }[] = [],
): string | null {
  if (!['created', 'executing', 'failed'].includes(run.status)) return null;
  const failed = obligations.filter((o) => o.status === 'failed' && o.blocking !== false && !o.retracted);
  if (failed.length === 0) return null;
  const names = failed.map((o) => o.check_name);
  const record = names
    .map((c) => `yoke deployment-runs qa-verdict ${run.run_id} --check ${c} --status passed`)
    .join('; ');
  const where = [...new Set(failed.map((o) => o.stage_name ?? 'settlement'))].join(', ');
  if (run.status === 'failed')
    return `once ${names.join(', ')} is fixed, record it again: ${record} (or --status waived), then retry: yoke deployment-runs retry ${run.run_id}; while it reads failed, a retry fails at ${where} again`;
  const passed = new Set(stages.filter((s) => s.status === 'passed').map((s) => s.name));
  const completing = stages[stages.length - 1]?.name;
  const consequence =
    completing && failed.every((o) => o.stage_name !== null && passed.has(o.stage_name))
      ? `the run is held before ${completing}`
      : `the run fails at ${where}`;
  return `once ${names.join(', ')} is fixed, record it again: ${record} (or --status waived); while it reads failed, ${consequence}`;
}
