import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A throwaway git repository on branch main, for containment checks (T2) against real git. */
export interface ScratchRepository {
  dir: string;
  /** Runs git in the repository and returns its trimmed output. */
  git: (...args: string[]) => string;
  /** Writes `text` to `file`, commits it with `message`, and returns the new commit. */
  commit: (file: string, text: string, message: string) => string;
}

export function scratchRepository(prefix: string, author: { name: string; email: string }): ScratchRepository {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const env = {
    ...process.env,
    GIT_AUTHOR_NAME: author.name,
    GIT_AUTHOR_EMAIL: author.email,
    GIT_COMMITTER_NAME: author.name,
    GIT_COMMITTER_EMAIL: author.email,
  };
  const git = (...args: string[]) => execFileSync('git', ['-C', dir, ...args], { env, encoding: 'utf8' }).trim();
  git('init', '-q', '-b', 'main');
  const commit = (file: string, text: string, message: string) => {
    writeFileSync(join(dir, file), text);
    git('add', file);
    git('commit', '-q', '-m', message);
    return git('rev-parse', 'HEAD');
  };
  return { dir, git, commit };
}
