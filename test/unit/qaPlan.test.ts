import { planSteps, sameCommit, needsMachineAfter } from '../../domain/qaPlan';
import { validateProjectDefinition, formatPath } from '../../domain/projectDefinition';

test('a plan walks its host reset and gate before its cases, in order', () => {
  const steps = planSteps({
    id: 'p',
    host_reset: { test_machine: 'lab', command: 'reset' },
    gate: { prompt: 'ready?' },
    cases: [
      { name: 'a', automatic: { test_machine: 'lab', command: 'run', pass_exit_status: 0 } },
      { name: 'b', manual: { instructions: 'look' } },
    ],
  });
  expect(steps.map((s) => [s.ordinal, s.name, s.kind])).toEqual([
    [0, 'host-reset', 'host_reset'],
    [1, 'gate', 'gate'],
    [2, 'a', 'automatic'],
    [3, 'b', 'manual'],
  ]);
  expect(needsMachineAfter(steps, 0, 'lab')).toBe(true);
  expect(needsMachineAfter(steps, 2, 'lab')).toBe(false);
});

test('Q2 short and full forms of one commit are the same build; another commit is not', () => {
  expect(sameCommit('abcdef1', 'ABCDEF1234567')).toBe(true);
  expect(sameCommit('abcdef1234', 'abcdef9999')).toBe(false);
  expect(sameCommit('abc', 'abc')).toBe(false); // too short to name a build
});

test('plans: an obligation or stage check naming an unknown plan, and a case that is neither or both kinds, are named with their paths', () => {
  const { issues } = validateProjectDefinition({
    project: 'p',
    environments: [{ name: 'stage', url: 'http://s.test', tier: 'stage' }],
    flows: [
      {
        name: 'f',
        stages: [{ name: 'qa', kind: 'qa', target: 'stage', scope: 'run', checks: [{ name: 'c', plan: 'ghost' }] }],
      },
    ],
    plans: [
      { id: 'real', cases: [{ name: 'x' }, { name: 'y', manual: {}, automatic: { test_machine: 'm', command: 'c' } }] },
    ],
    items: [{ id: 'P-1', obligations: [{ case: 'e2e', qa_phase: 'post_deploy', plan_id: 'nope' }] }],
  });
  const paths = issues.map((i) => `${formatPath(i.path)}: ${i.message}`);
  expect(paths).toEqual(
    expect.arrayContaining([
      'flows[0].stages[0].checks[0].plan: no plan with id "ghost"',
      'items[0].obligations[0].plan_id: no plan with id "nope"',
      'plans[0].cases[0]: a case is either automatic or manual (exactly one)',
      'plans[0].cases[1]: a case is either automatic or manual (exactly one)',
    ]),
  );
});

test('C3 a plan names its test machines in any case and keeps the one lower-case spelling the machine has', () => {
  const { definition, issues } = validateProjectDefinition({
    project: 'p',
    environments: [{ name: 'stage', url: 'http://s.test', tier: 'stage' }],
    flows: [],
    plans: [
      {
        id: 'smoke',
        host_reset: { test_machine: 'LAB3', command: 'reset' },
        cases: [{ name: 'a', automatic: { test_machine: 'Lab3', command: 'run' } }],
      },
    ],
  });
  expect(issues).toEqual([]);
  const plan = definition!.plans[0]!;
  expect([plan.host_reset!.test_machine, plan.cases[0]!.automatic!.test_machine]).toEqual(['lab3', 'lab3']);
});
