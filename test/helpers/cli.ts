import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { projectRoot } from '../../config/yokeConfig';
import { testKeyDir } from './sshKeys';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export const yokeBin = join(projectRoot(__dirname), 'bin', 'yoke');
const HOME = mkdtempSync(join(tmpdir(), 'yoke-cli-'));

/** Runs the built `yoke` binary against a test database, the way a user would. */
export function yoke(databaseUrl: string, args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [yokeBin, ...args],
      {
        env: {
          PATH: process.env.PATH,
          DATABASE_URL: databaseUrl,
          YOKE_HOME: HOME,
          YOKE_SSH_KEY_DIR: testKeyDir,
          // Nothing listens there: a Temporal server someone runs on the default port (npm start)
          // must never receive a test's workflows. Tests that need Temporal name its address.
          TEMPORAL_ADDRESS: '127.0.0.1:9',
          ...env,
        },
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

export function json<T = any>(r: CliResult): T {
  return JSON.parse(r.stdout) as T;
}

/** The JSON error object a --json command writes on stderr. */
export function jsonError(r: CliResult): {
  code: string;
  message: string;
  recovery: string;
  details: Record<string, unknown>;
} {
  return JSON.parse(r.stderr.trim().split('\n').pop()!).error;
}

/** Runs setup commands in order; the first failure stops the test file with its stderr. */
export async function setUp(run: (args: string[]) => Promise<CliResult>, commands: string[][]): Promise<void> {
  for (const args of commands) {
    const r = await run(args);
    if (r.code !== 0) throw new Error(`setup failed: yoke ${args.join(' ')}: ${r.stderr}`);
  }
}
