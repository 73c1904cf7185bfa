import type { Command } from 'commander';
import { buildProgram } from '../../cli/program';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { json, setUp, yoke } from '../helpers/cli';

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
});
