import { readThroughOutage } from '../../cli/outage';
import { refusal, unreachable } from '../../domain/errors';

/**
 * W7 issue 10: a waiting or following command (`acquire --wait`, `qa watch`, `deployment-runs
 * watch`) rides out a Postgres outage shorter than its grace, is told of it once, and ends with
 * postgres_unreachable (exit 3) once the outage outlasts the grace; any other error ends it at once.
 */
const away = () => unreachable('postgres_unreachable', 'cannot reach Postgres', { recovery: 'start it', details: {} });

/** A read that fails with `errors` in turn, then answers `answer`; counts its calls. */
function reads(errors: Error[], answer = 'row') {
  const calls = { n: 0 };
  const read = async () => {
    const err = errors[calls.n++];
    if (err) throw err;
    return answer;
  };
  return { read, calls };
}

test('W7 issue 10 an outage shorter than the grace is ridden out: the read is tried again and its answer returned, the outage told once', async () => {
  const { read, calls } = reads([away(), away()]);
  const told: string[] = [];
  await expect(readThroughOutage(read, (m) => told.push(m), 10_000)).resolves.toBe('row');
  expect(calls.n).toBe(3);
  expect(told).toHaveLength(1);
  expect(told[0]).toMatch(/Postgres is out of reach .*trying again every second for up to 10 s/);
});

test('W7 issue 10 an outage longer than the grace ends the command with postgres_unreachable (exit 3)', async () => {
  const { read, calls } = reads(Array.from({ length: 100 }, away));
  const ended = await readThroughOutage(read, () => undefined, 1_500).catch((err: unknown) => err);
  expect(ended).toMatchObject({ kind: 'unreachable', code: 'postgres_unreachable' });
  expect(calls.n).toBeGreaterThanOrEqual(2);
  expect(calls.n).toBeLessThan(5);
});

test('W7 issue 10 any other error ends the read at once, without a retry', async () => {
  const { read, calls } = reads([refusal('session_ended', 'session s ended', { recovery: 'register a new one' })]);
  const told: string[] = [];
  await expect(readThroughOutage(read, (m) => told.push(m), 10_000)).rejects.toMatchObject({ code: 'session_ended' });
  expect(calls.n).toBe(1);
  expect(told).toEqual([]);
});
