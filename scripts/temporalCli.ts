import { execFileSync, spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal@v1.5.1';

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function goBinDir(): string | undefined {
  try {
    const gobin = execFileSync('go', ['env', 'GOBIN'], { encoding: 'utf8' }).trim();
    if (gobin) return gobin;
    return join(execFileSync('go', ['env', 'GOPATH'], { encoding: 'utf8' }).trim(), 'bin');
  } catch {
    return undefined;
  }
}

/**
 * The Temporal CLI (which holds the dev server) is not on npm: $TEMPORAL_CLI, then
 * `temporal` on PATH, then Go's bin folder, else build it with `go install` (minutes on a
 * new machine; Go's build cache makes later builds quick).
 */
export function findTemporalCli(log: (line: string) => void = console.error): string {
  const fromEnv = process.env.TEMPORAL_CLI;
  if (fromEnv) {
    if (!executable(fromEnv)) throw new Error(`TEMPORAL_CLI=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && executable(join(dir, 'temporal'))) return join(dir, 'temporal');
  }
  const bin = goBinDir();
  if (bin === undefined) {
    throw new Error(
      'no Temporal CLI found and Go is not installed: install Go, or set TEMPORAL_CLI to a temporal binary, or TEMPORAL_ADDRESS to a running cluster',
    );
  }
  const built = join(bin, 'temporal');
  if (executable(built)) return built;
  log(`building the Temporal CLI: go install ${TEMPORAL_CLI_MODULE} (first time only; a few minutes)`);
  const started = Date.now();
  const result = spawnSync('go', ['install', TEMPORAL_CLI_MODULE], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (result.status !== 0 || !executable(built))
    throw new Error(`go install ${TEMPORAL_CLI_MODULE} failed (exit ${result.status})`);
  log(`built ${built} in ${Math.round((Date.now() - started) / 1000)} s`);
  return built;
}
