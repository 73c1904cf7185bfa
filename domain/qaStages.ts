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
