import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** Where yoke keeps its local state; no dependencies, so the status-line hook can use it. */
export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/yoke';
export const DEFAULT_TEMPORAL_ADDRESS = '127.0.0.1:7233';

/** The repository root: the nearest folder above this file holding package.json. */
export function projectRoot(from: string = __dirname): string {
  let dir = resolve(from);
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) return process.cwd();
    dir = parent;
  }
  return dir;
}

export function yokeHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.YOKE_HOME ? resolve(env.YOKE_HOME) : join(projectRoot(), '.yoke');
}

/** Issue 13: the worker's own SSH keys; a test machine or deploy host names one by its file name (--credential). */
export function sshKeyDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.YOKE_SSH_KEY_DIR ? resolve(env.YOKE_SSH_KEY_DIR) : join(yokeHome(env), 'ssh-keys');
}

export function servicesFile(home: string): string {
  return join(home, 'services.json');
}
