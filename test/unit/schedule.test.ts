import { computeSchedule, type ScheduleInput } from '../../domain/schedule';

const now = '2026-12-03T08:00:00Z';
const session = (session_id: string) => ({ session_id, actor_id: session_id, machine_id: null, project: 'web' });
const run = (run_id: string, status: string, driver: string | null, members: string[]) => ({
  run_id,
  project: 'web',
  status,
  driver_session_id: driver,
  driver_heartbeat_at: driver ? now : null,
  members,
});
const input = (runs: ScheduleInput['runs']): ScheduleInput => ({
  now,
  driverFreshMs: 60_000,
  sessions: [session('seat'), session('driver')],
  claims: [{ claim_id: 1, session_id: 'seat', kind: 'steering', item: null, project: 'web', claimed_at: now }],
  runs,
  items: [],
});

describe('U1 explicit staffing follows pinned workflow bindings', () => {
  it('U1 a live driver staffs its run members even when an undriven run that sorts first shares one', () => {
    const schedule = computeSchedule(
      input([run('run-14', 'created', null, ['WEB-1']), run('run-15', 'executing', 'driver', ['WEB-1', 'WEB-3'])]),
    );
    expect(schedule.by_session).toEqual({ driver: ['WEB-1', 'WEB-3'] });
    expect(schedule.staffing.find((s) => s.item === 'WEB-1')).toMatchObject({
      session_id: 'driver',
      basis: 'pinned_run_driver',
      run_id: 'run-15',
    });
  });

  it('U1 among fallback runs an executing run binds before a created one, and run-9 before run-10', () => {
    const schedule = computeSchedule(
      input([
        run('run-10', 'executing', null, ['WEB-2']),
        run('run-9', 'executing', null, ['WEB-2']),
        run('run-1', 'created', null, ['WEB-2', 'WEB-4']),
      ]),
    );
    expect(schedule.staffing.find((s) => s.item === 'WEB-2')).toMatchObject({
      basis: 'steering_fallback',
      run_id: 'run-9',
    });
    expect(schedule.staffing.find((s) => s.item === 'WEB-4')).toMatchObject({ run_id: 'run-1' });
  });
});
