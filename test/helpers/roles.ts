import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { Client } from 'pg';
import { connectionStringFor } from '../../activities/actors';
import type { Database } from '../../db/database';
import { createDb } from '../../db/pool';

/**
 * Issue 13 raw-SQL tests: actors are created straight through `yoke_add_actor` as the
 * superuser, each name carrying this file's suffix (roles are cluster-wide), and each actor
 * gets one open client. `end()` closes the clients and drops the roles.
 */
export interface SqlActor {
  name: string;
  url: string;
  q<T extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
}

export function sqlActors(superUrl: () => string) {
  const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const made: { name: string; client: Client }[] = [];
  async function asSuper<T>(fn: (c: Client) => Promise<T>): Promise<T> {
    const c = new Client({ connectionString: superUrl() });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  }
  return {
    async add(base: string, kind: 'user' | 'admin' | 'agent' | 'worker' = 'user'): Promise<SqlActor> {
      const name = `${base}_${suffix}`;
      const secret = randomBytes(12).toString('hex');
      await asSuper((c) => c.query('SELECT yoke_add_actor($1, $2, $3)', [name, secret, kind]));
      const url = connectionStringFor(superUrl(), name, secret);
      const client = new Client({ connectionString: url });
      await client.connect();
      made.push({ name, client });
      return {
        name,
        url,
        q: async <T extends Record<string, unknown>>(text: string, values?: unknown[]) =>
          (await client.query<T>(text, values)).rows,
      };
    },
    async end(): Promise<void> {
      for (const { client } of made) await client.end();
      await asSuper(async (c) => {
        for (const { name } of made.splice(0)) await c.query('SELECT yoke_remove_actor($1)', [name]);
      });
    },
  };
}

/** The refusal a statement raised: the spec's code (YK001 detail) or permission_denied for 42501. */
export async function refusalOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    const e = err as { code?: string; detail?: string; message?: string };
    if (e.code === 'YK001') return e.detail!;
    if (e.code === '42501') return 'permission_denied';
    throw err;
  }
  return 'allowed';
}

/**
 * Kysely pools connected as actors, so a test runs the CLI's own activities under their roles;
 * `destroy()` closes every pool it opened.
 */
export function rolePools() {
  const pools: Kysely<Database>[] = [];
  return {
    dbOf(actor: SqlActor): Kysely<Database> {
      const db = createDb(actor.url, { max: 2 });
      pools.push(db);
      return db;
    },
    async destroy(): Promise<void> {
      for (const db of pools.splice(0)) await db.destroy();
    },
  };
}
