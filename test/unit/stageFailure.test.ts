import { ActivityFailure, ApplicationFailure, RetryState, TimeoutFailure } from '@temporalio/common';
import { failureDetail } from '../../workflows/stageFailure';

const failed = (cause: Error) =>
  new ActivityFailure('failed', 'runDeployAction', '7', RetryState.MAXIMUM_ATTEMPTS_REACHED, 'worker-1', cause);

test('O4 issue 10 a deploy whose worker was stopped (SIGTERM past its shutdown grace) fails worker_lost with the way on, as one whose worker died does', () => {
  const stopped = failureDetail(
    failed(
      ApplicationFailure.create({
        type: 'WorkerShutdown',
        message: 'Worker is shutting down and this activity did not complete in time',
      }),
    ),
    'run-9',
  );
  expect(stopped).toMatch(/^worker_lost: the worker running runDeployAction was stopped before it finished/);
  expect(stopped).toContain('check the target, then yoke deployment-runs retry run-9');
  const died = failureDetail(failed(new TimeoutFailure(undefined, undefined, 'HEARTBEAT')), 'run-9');
  expect(died).toMatch(/^worker_lost: the worker running runDeployAction stopped heartbeating/);
  expect(died).toContain('yoke deployment-runs retry run-9');
  expect(failureDetail(failed(ApplicationFailure.create({ type: 'DeployRefused', message: 'no' })), 'run-9')).toBe(
    'DeployRefused: no',
  );
});
