import { scratchRepository } from '../../bench/gitRepository';

/** A real git repository made by the test: commits A -> B -> C on one line, and D unrelated to them. */
export interface TestRepository {
  dir: string;
  A: string;
  B: string;
  C: string;
  D: string;
}

export function createTestRepository(): TestRepository {
  const repo = scratchRepository('yoke-repo-', { name: 'yoke test', email: 'test@yoke.invalid' });
  const commit = (file: string, text: string) => repo.commit(file, text, `${file}: ${text}`);
  const A = commit('app.txt', 'A');
  const B = commit('app.txt', 'B');
  const C = commit('app.txt', 'C');
  repo.git('checkout', '-q', '--orphan', 'elsewhere');
  repo.git('rm', '-q', '-rf', '.');
  const D = commit('other.txt', 'D');
  repo.git('checkout', '-q', 'main');
  return { dir: repo.dir, A, B, C, D };
}
