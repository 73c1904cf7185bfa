import type { QaPlanDefinition } from './projectDefinition';

/**
 * A plan execution walks its plan as ordered steps: the optional host reset and human gate
 * first, then the cases. Pure, so the workflow, the activities and the CLI agree on ordinals.
 */
export type StepKind = 'host_reset' | 'gate' | 'automatic' | 'manual';

export interface PlanStep {
  ordinal: number;
  name: string;
  kind: StepKind;
  /** Automatic steps and the host reset run a command on this test machine. */
  test_machine: string | null;
  command: string | null;
  pass_exit_status: number;
  instructions: string | null;
}

export const HOST_RESET_STEP = 'host-reset';
export const GATE_STEP = 'gate';

export function planSteps(plan: QaPlanDefinition): PlanStep[] {
  const steps: Omit<PlanStep, 'ordinal'>[] = [];
  if (plan.host_reset)
    steps.push({
      name: HOST_RESET_STEP,
      kind: 'host_reset',
      test_machine: plan.host_reset.test_machine,
      command: plan.host_reset.command,
      pass_exit_status: 0,
      instructions: null,
    });
  if (plan.gate)
    steps.push({
      name: GATE_STEP,
      kind: 'gate',
      test_machine: null,
      command: null,
      pass_exit_status: 0,
      instructions: plan.gate.prompt,
    });
  for (const c of plan.cases) {
    steps.push(
      c.automatic
        ? {
            name: c.name,
            kind: 'automatic',
            test_machine: c.automatic.test_machine,
            command: c.automatic.command,
            pass_exit_status: c.automatic.pass_exit_status ?? 0,
            instructions: null,
          }
        : {
            name: c.name,
            kind: 'manual',
            test_machine: null,
            command: null,
            pass_exit_status: 0,
            instructions: c.manual?.instructions ?? '',
          },
    );
  }
  return steps.map((s, ordinal) => ({ ...s, ordinal }));
}

/** Steps a human answers with `yoke qa verdict`. */
export function isHumanStep(step: Pick<PlanStep, 'kind'>): boolean {
  return step.kind === 'manual' || step.kind === 'gate';
}

/** Whether the execution still needs `machine` after the step at `ordinal` (it keeps the lease). */
export function needsMachineAfter(steps: PlanStep[], ordinal: number, machine: string): boolean {
  return steps.some((s) => s.ordinal > ordinal && s.test_machine === machine);
}

/** `{{commit}}`, `{{run_id}}`, `{{url}}`, `{{execution_id}}` in case commands. */
export function fillCommand(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, key: string) => values[key] ?? whole);
}

/** Short and full forms of one commit name the same build. */
export function sameCommit(a: string, b: string): boolean {
  const x = a.trim().toLowerCase();
  const y = b.trim().toLowerCase();
  return x.length >= 7 && y.length >= 7 && (x.startsWith(y) || y.startsWith(x));
}

/** The `qa begin` that starts an execution like the given one again (recoveries name it whole). */
export function qaBeginCommand(e: { run_id: string; stage: string; plan_id: string; item: string | null }): string {
  return `yoke qa begin --run ${e.run_id} --stage ${e.stage} --plan ${e.plan_id}${e.item ? ` --item ${e.item}` : ''}`;
}

/**
 * Issue 10 / W3: why a case gave its machine back and runs again (its command reported no
 * result, or SSH could not reach the machine). The execution's wait in the machine's line
 * carries it as its rationale, `<code>: <detail>`.
 */
export const CASE_INTERRUPTIONS = ['step_interrupted', 'ssh_unavailable'] as const;

export function interruptionRationale(code: (typeof CASE_INTERRUPTIONS)[number], detail: string): string {
  return `${code}: ${detail}`;
}

/** Whether a wait's rationale says a case was interrupted (interruptionRationale). */
export function isInterruption(rationale: string): boolean {
  return CASE_INTERRUPTIONS.some((code) => rationale.startsWith(`${code}: `));
}
