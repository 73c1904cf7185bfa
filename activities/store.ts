import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { createDb } from '../db/pool';

/**
 * The store as the CLI and the web server hold it: they reach Postgres only through activities
 * (DESIGN.md's layer rules), so opening it lives here.
 */
export type Store = Kysely<Database>;

/** `connections`: the pool size, at least 2 (a command may run a statement while holding a lock). */
export function openStore(databaseUrl: string, options: { connections?: number } = {}): Store {
  return createDb(databaseUrl, { max: Math.max(2, options.connections ?? 2) });
}
