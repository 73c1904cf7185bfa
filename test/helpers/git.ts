import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A real git repository made by the test: commits A -> B -> C on one line, and D unrelated to them. */
export interface TestRepository {
  dir: string;
  A: string;
  B: string;
  C: string;
  D: string;
}

export function createTestRepository(): TestRepository {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-repo-'));
  const env = {
    ...process.env,
    GIT_AUTHOR_NAME: 'yoke test',
    GIT_AUTHOR_EMAIL: 'test@yoke.invalid',
    GIT_COMMITTER_NAME: 'yoke test',
    GIT_COMMITTER_EMAIL: 'test@yoke.invalid',
  };
  const git = (...args: string[]) => execFileSync('git', ['-C', dir, ...args], { env, encoding: 'utf8' }).trim();
  git('init', '-q', '-b', 'main');
  const commit = (file: string, text: string) => {
    writeFileSync(join(dir, file), text);
    git('add', file);
    git('commit', '-q', '-m', `${file}: ${text}`);
    return git('rev-parse', 'HEAD');
  };
  const A = commit('app.txt', 'A');
  const B = commit('app.txt', 'B');
  const C = commit('app.txt', 'C');
  git('checkout', '-q', '--orphan', 'elsewhere');
  git('rm', '-q', '-rf', '.');
  const D = commit('other.txt', 'D');
  git('checkout', '-q', 'main');
  return { dir, A, B, C, D };
}
