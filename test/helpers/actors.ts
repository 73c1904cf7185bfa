import { randomBytes } from 'node:crypto';
import { json, yoke, type CliResult } from './cli';

/**
 * Issue 13 tests connect as real non-superuser roles. Roles belong to the whole cluster while
 * each test file has its own database, so every actor name carries this file's suffix and
 * `remove()` drops them in afterAll.
 */
export interface TestActor {
  /** The role name, which is also the actor id recorded on rows. */
  name: string;
  url: string;
  run(args: string[], env?: Record<string, string>): Promise<CliResult>;
}

export function actorFactory(adminUrl: () => string) {
  const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const made: string[] = [];
  return {
    async add(base: string, kind: 'user' | 'admin' | 'agent' | 'worker' = 'user'): Promise<TestActor> {
      const name = `${base}_${suffix}`;
      const flags = kind === 'user' ? [] : [`--${kind}`];
      const r = await yoke(adminUrl(), ['actors', 'add', name, ...flags, '--json']);
      if (r.code !== 0) throw new Error(`actors add ${name}: ${r.stderr}`);
      made.push(name);
      const url = json<{ connection_string: string }>(r).connection_string;
      return { name, url, run: (args, env = {}) => yoke(url, args, env) };
    },
    async removeAll(): Promise<void> {
      for (const name of made.splice(0)) await yoke(adminUrl(), ['actors', 'remove', name]);
    },
  };
}
