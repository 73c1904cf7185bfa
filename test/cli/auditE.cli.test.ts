import { Client } from 'pg';
import { jsonError, yoke } from '../helpers/cli';
import { webReleaseCliFile } from '../helpers/runs';

/**
 * The README's promises at the edges (issue 15): a database that is not there, or not yoke's,
 * names itself and its recovery with exit 3; a recovery never points at a command that is
 * itself refused.
 */
const { run, createdRun } = webReleaseCliFile(['d1', 'd2']);

function databaseNamed(name: string): string {
  const url = new URL(process.env.YOKE_TEST_PG_SERVER!);
  url.pathname = `/${name}`;
  return url.toString();
}

test('issue 15: a DATABASE_URL naming a database that does not exist is database_missing (exit 3) with a recovery that creates it, not "cannot reach Postgres"', async () => {
  const r = await yoke(databaseNamed(`yoke_nosuch_${process.pid}`), ['projects', 'list', '--json']);
  expect(r.code).toBe(3);
  const error = jsonError(r);
  expect(error.code).toBe('database_missing');
  expect(error.recovery).toContain('yoke db migrate');
  expect(error.recovery).not.toContain('reachable');
});

test('issue 15: a database without yoke functions is database_not_migrated (exit 3), not internal_error', async () => {
  const name = `yoke_empty_${process.pid}`;
  const admin = new Client({ connectionString: databaseNamed('postgres') });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  try {
    const r = await yoke(databaseNamed(name), ['actors', 'whoami', '--json']);
    expect(r.code).toBe(3);
    expect(jsonError(r)).toMatchObject({ code: 'database_not_migrated' });
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await admin.end();
  }
});

test('R1 issue 15: refusing a created run to a session that neither drives it nor holds the seat names execute as the way to drive it, not heartbeat (refused for a created run)', async () => {
  const runId = await createdRun('abcdef5678', ['WEB-2']);
  const refused = await run(['deployment-runs', 'approve', runId, '--stage', 'signoff', '--json'], 'd2');
  expect(refused.code).toBe(1);
  const error = jsonError(refused);
  expect(error.code).toBe('steering_seat_required');
  expect(error.recovery).toContain(`yoke deployment-runs execute ${runId}`);
  expect(error.recovery).not.toContain('heartbeat');
});
