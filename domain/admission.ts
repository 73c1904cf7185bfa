import type { StageDefinition } from './projectDefinition';

/**
 * Member admission (D5, D6): which of an item's QA obligations a run carries. Pure: the
 * callers read the rows and write the results.
 */
export interface Obligation {
  item: string;
  case_key: string;
  qa_phase: 'pre_merge' | 'post_deploy';
  target_env: string | null;
  plan_id: string | null;
  blocking: boolean;
  waived: boolean;
  superseded: boolean;
  run_id: string | null;
}

export interface UntargetedObligation {
  code: 'obligation_not_targeted';
  item: string;
  requirement_id: string;
  declared_environment: string | null;
  run_stage_targets: string[];
  message: string;
}

export function requirementId(item: string, caseKey: string): string {
  return `${item}/${caseKey}`;
}

function qaStages(stages: StageDefinition[]): StageDefinition[] {
  return stages.filter((s) => s.kind === 'qa');
}

/** Outstanding and owed by this item to a run: unwaived, unsuperseded, unbound post-deploy rows. */
function owed(o: Obligation): boolean {
  return o.qa_phase === 'post_deploy' && !o.waived && !o.superseded && o.run_id === null;
}

/**
 * D5: the derived selection: the item's outstanding post-deploy obligations with no plan_id
 * whose target_env a QA stage of the flow targets (an undeclared target_env takes whichever
 * target a QA stage observes). Pre-merge rows are never rolled in.
 */
export function derivedSelection(obligations: Obligation[], stages: StageDefinition[]): string[] {
  const targets = new Set(qaStages(stages).map((s) => s.target));
  return obligations
    .filter(
      (o) => owed(o) && o.plan_id === null && (o.target_env === null ? targets.size > 0 : targets.has(o.target_env)),
    )
    .map((o) => requirementId(o.item, o.case_key))
    .sort();
}

/**
 * D6: obligations no QA stage of the run targets: not an error, never silent. An obligation
 * with no declared environment is answered by any QA stage, so it is untargeted only on a
 * flow that has none.
 */
export function untargetedObligations(obligations: Obligation[], stages: StageDefinition[]): UntargetedObligation[] {
  const targets = [...new Set(qaStages(stages).map((s) => s.target))].sort();
  return obligations
    .filter((o) => owed(o) && (o.target_env === null ? targets.length === 0 : !targets.includes(o.target_env)))
    .map((o) => ({
      code: 'obligation_not_targeted' as const,
      item: o.item,
      requirement_id: requirementId(o.item, o.case_key),
      declared_environment: o.target_env,
      run_stage_targets: targets,
      message: `obligation ${requirementId(o.item, o.case_key)} declares ${o.target_env === null ? 'no environment' : `environment ${o.target_env}`}; this run's QA stages target ${targets.length ? targets.join(', ') : 'no environment'}, so another run must answer it`,
    }));
}

/** The QA stage a selected requirement is answered at: the first QA stage on its environment. */
export function answeringStage(
  o: Pick<Obligation, 'target_env'>,
  stages: StageDefinition[],
): StageDefinition | undefined {
  const qa = qaStages(stages);
  return o.target_env === null ? qa[0] : qa.find((s) => s.target === o.target_env);
}
