import { spawn } from 'node:child_process';
import { sql } from 'kysely';
import { yokeBin } from '../helpers/cli';
import { createTestDatabase, type TestDatabase } from '../helpers/db';

/**
 * A reader that closes the pipe early (`yoke ... --json | head -1`) ends the CLI quietly: no
 * unhandled EPIPE and its stack trace on stderr, exit 0.
 */

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  // Enough sessions that `sessions list --json` writes far more than a pipe buffer holds, so the
  // CLI is still writing when the reader has gone.
  await sql`INSERT INTO sessions (session_id, actor_id, machine_id)
            SELECT 'pipe-' || g, 'pipe-actor', 'pipe-machine' FROM generate_series(1, 800) g`.execute(t.db);
});
afterAll(async () => {
  await t.drop();
});

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

/**
 * Runs the built CLI with its stdout on a pipe; `reader` is handed the pipe and may close it.
 * `stdin`, when given, is written to the CLI's input.
 */
function run(
  args: string[],
  reader: (stdout: NodeJS.ReadableStream & { destroy(): void }) => void,
  stdin?: string,
): Promise<Ended> {
  return new Promise((resolve) => {
    const cli = spawn(process.execPath, [yokeBin, ...args], {
      env: { PATH: process.env.PATH, DATABASE_URL: t.url },
      stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    if (stdin !== undefined) cli.stdin!.end(stdin);
    let stderr = '';
    cli.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    reader(cli.stdout!);
    cli.on('close', (code, signal) => resolve({ code, signal, stderr }));
  });
}

test('a reader that closes before the CLI writes (`yoke --help | head -0`) ends it quietly, exit 0', async () => {
  const ended = await run(['--help'], (stdout) => stdout.destroy());
  expect(ended).toEqual({ code: 0, signal: null, stderr: '' });
});

test('`yoke sessions list --json | head -1`: a reader that closes after the first line ends the CLI quietly, exit 0', async () => {
  let first = '';
  const ended = await run(['sessions', 'list', '--json'], (stdout) => {
    // A Node reader: takes the first line, then closes its end of the pipe.
    stdout.on('data', (d: Buffer) => {
      if (first.includes('\n')) return;
      first += d.toString();
      if (first.includes('\n')) stdout.destroy();
    });
  });
  expect(first.split('\n')[0]).toBe('[');
  expect(ended).toEqual({ code: 0, signal: null, stderr: '' });
});

test('U3 U4 a harness that stops reading the status line ends the hook quietly, exit 0, with the served facts already attested', async () => {
  await sql`INSERT INTO sessions (session_id, actor_id, harness) VALUES ('pipe-hook', 'pipe-actor', 'claude')`.execute(
    t.db,
  );
  const status = {
    session_id: 'pipe-hook',
    model: { id: 'claude-haiku-4-5', display_name: 'Haiku 4.5' },
    context_window: { context_window_size: 200_000 },
  };
  const ended = await run(['hooks', 'status-line'], (stdout) => stdout.destroy(), JSON.stringify(status));
  expect(ended).toEqual({ code: 0, signal: null, stderr: '' });
  const served = await t.db
    .selectFrom('sessions')
    .select(['served_model', 'served_window'])
    .where('session_id', '=', 'pipe-hook')
    .executeTakeFirstOrThrow();
  expect(served).toEqual({ served_model: 'claude-haiku-4-5', served_window: 200_000 });
});
