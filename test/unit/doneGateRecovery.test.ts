import { doneGateReasons, type DoneGateFacts } from '../../domain/completion';

/** Issue 12 audit (D8): a member blocked by a newer membership is told what actually clears it. */
const facts = (readRun: DoneGateFacts['readRun']): DoneGateFacts => ({
  item: 'SHOP-3',
  readRun,
  closingRunId: 'run-3',
  runQa: [],
  unanswered: [],
  prepared: true,
  unmetDependencies: [],
});

test('D8 O1 issue 12 audit: a completion authority reading a newer created run names remove-item first (executing it waits for the closing run to free its origins), then execute, not watch', () => {
  const [reason] = doneGateReasons(facts({ run_id: 'run-5', status: 'created', settling: false }));
  expect(reason).toMatchObject({
    code: 'delivery_not_discharged',
    recovery:
      'let run-3 deliver SHOP-3: yoke deployment-runs remove-item run-5 SHOP-3 --reason R; or settle run run-5: yoke deployment-runs execute run-5 (it waits while run-3 occupies an origin they share)',
  });
  const [executing] = doneGateReasons(facts({ run_id: 'run-5', status: 'executing', settling: false }));
  expect(executing!.recovery).toContain('yoke deployment-runs watch run-5');
  expect(executing!.recovery).toContain('yoke deployment-runs remove-item run-5 SHOP-3 --reason R');
});
