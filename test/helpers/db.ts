import { randomBytes, randomInt } from 'node:crypto';
import type { Kysely } from 'kysely';
import { Client } from 'pg';
import type { Database } from '../../db/database';
import { createDb } from '../../db/pool';
import { withDatabase } from '../../scripts/postgres';

export interface TestDatabase {
  url: string;
  db: Kysely<Database>;
  /** A separate pool on the same database, for tests that need independent connections. */
  connect(max?: number): Kysely<Database>;
  drop(): Promise<void>;
}

async function admin<T>(fn: (c: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: process.env.YOKE_TEST_PG_SERVER });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Test files share one Temporal dev server, and workflow ids carry run and execution numbers
 * (`deployment-run/run-N`, `qa-plan-execution/N`): each database numbers from its own random
 * million, so two files running side by side never start or signal each other's workflows.
 */
async function numberApart(url: string): Promise<void> {
  const start = randomInt(2, 2000) * 1_000_000;
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`SELECT setval('deployment_run_numbers', ${start})`);
    await c.query(`ALTER TABLE qa_plan_executions ALTER COLUMN execution_id RESTART WITH ${start}`);
  } finally {
    await c.end();
  }
}

/** A fresh database cloned from the migrated template, so test files run in any order. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `yoke_t_${process.pid}_${randomBytes(4).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE "${name}" TEMPLATE "${process.env.YOKE_TEST_TEMPLATE}"`));
  const url = withDatabase(process.env.YOKE_TEST_PG_SERVER!, name);
  await numberApart(url);
  const pools: Kysely<Database>[] = [];
  const connect = (max = 5) => {
    const db = createDb(url, { max });
    pools.push(db);
    return db;
  };
  const db = connect(10);
  return {
    url,
    db,
    connect,
    drop: async () => {
      await Promise.all(pools.map((p) => p.destroy()));
      await admin((c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
    },
  };
}
