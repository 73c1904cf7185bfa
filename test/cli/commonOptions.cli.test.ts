import type { Command } from 'commander';
import { buildProgram } from '../../cli/program';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, jsonError, setUp, yoke } from '../helpers/cli';

/** Every leaf command of the CLI with its path and long option names. */
function leaves(cmd: Command, path: string[] = []): { path: string; options: string[] }[] {
  if (cmd.commands.length) return cmd.commands.flatMap((c) => leaves(c, [...path, c.name()]));
  return [{ path: path.join(' '), options: cmd.options.map((o) => o.long ?? '') }];
}

// The status-line hook prints the one line Claude Code shows under the prompt (JSON is not its
// output), and its session comes in the harness's payload on stdin.
const HOOK = 'hooks status-line';

test('every command accepts --session and --json (one base option set)', async () => {
  const commands = leaves(buildProgram());
  expect(commands.length).toBeGreaterThan(40);
  const missing = commands
    .filter(({ path }) => path !== HOOK)
    .flatMap(({ path, options }) => [
      ...(options.includes('--session') ? [] : [`${path}: --session`]),
      ...(options.includes('--json') ? [] : [`${path}: --json`]),
    ]);
  expect(missing).toEqual([]);
});

test('yoke hooks status-line --help answers at once (it used to wait for a payload on stdin)', async () => {
  const r = await yoke('postgres://unused', ['hooks', 'status-line', '--help']);
  expect(r.code).toBe(0);
  expect(r.stdout).toContain('Usage: yoke hooks status-line');
});

test("issue 8 --json between a group and its command is the command's; a group named without a command is command_missing under --json", async () => {
  const between = await yoke('postgres://unused', ['claims', '--json', 'list', '--help']);
  expect(between.code).toBe(0);
  expect(between.stdout).toContain('Usage: yoke claims list');
  for (const args of [
    ['--json', 'claims'],
    ['claims', '--json'],
  ]) {
    const bare = await yoke('postgres://unused', args);
    expect(bare.code).toBe(2);
    expect(jsonError(bare)).toMatchObject({
      code: 'command_missing',
      details: { command: 'yoke claims', commands: expect.arrayContaining(['list', 'coordination-claim']) },
    });
    expect(jsonError(bare).recovery).toContain('yoke claims --help');
  }
  // without --json a bare group prints its help, as before
  const help = await yoke('postgres://unused', ['claims']);
  expect(help.code).toBe(0);
  expect(help.stdout + help.stderr).toContain('Usage: yoke claims');
});

describe('a read command run with --session', () => {
  let t: TestDatabase;
  beforeAll(async () => {
    t = await createTestDatabase();
  });
  afterAll(async () => {
    await t.drop();
  });

  test('deployment-runs list and projects list take --session like the acting commands do', async () => {
    const run = (args: string[]) => yoke(t.url, args);
    await setUp(run, [
      ['projects', 'create', 'web', '--prefix', 'WEB'],
      ['sessions', 'register', '--session', 'd1', '--actor', 'alice', '--project', 'web'],
    ]);
    const projects = await run(['projects', 'list', '--session', 'd1', '--json']);
    expect(projects.code).toBe(0);
    expect(json<{ name: string }[]>(projects).map((p) => p.name)).toContain('web');
    const runs = await run(['deployment-runs', 'list', '--session', 'd1', '--json']);
    expect(runs.code).toBe(0);
    expect(json(runs)).toEqual([]);
  }, 180_000);

  test('issue 2 sessions register, heartbeat and end act as YOKE_SESSION_ID when --session is not given', async () => {
    const asB3 = (args: string[]) => yoke(t.url, args, { YOKE_SESSION_ID: 'b3' });
    const registered = await asB3(['sessions', 'register', '--actor', 'bob', '--json']);
    expect(registered.code).toBe(0);
    expect(json(registered)).toMatchObject({ session_id: 'b3', registered: true });
    const beat = await asB3(['sessions', 'heartbeat', '--json']);
    expect(beat.code).toBe(0);
    expect(json(beat)).toMatchObject({ session_id: 'b3', ended_at: null });
    const ended = await asB3(['sessions', 'end', '--json']);
    expect(ended.code).toBe(0);
    expect(json(ended)).toMatchObject({ session_id: 'b3', ended: true });
    // neither given: the usage error names both ways
    const none = await yoke(t.url, ['sessions', 'heartbeat', '--json']);
    expect(none.code).toBe(2);
    expect(JSON.parse(none.stderr.trim()).error).toMatchObject({ code: 'session_required' });
  }, 60_000);
});
