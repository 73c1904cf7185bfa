import { sql, type Insertable } from 'kysely';
import type { CheckKind } from '../domain/checkKinds';
import type { CheckRow, TestMachineChecksTable, TestMachineRow, TestMachinesTable } from './database';
import type { Executor } from './pool';

/** The test machines and the record of their checks (verification, golden capture). */

export async function testMachineByName(db: Executor, name: string): Promise<TestMachineRow | undefined> {
  return db.selectFrom('test_machines').selectAll().where('name', '=', name).executeTakeFirst();
}

export async function testMachines(db: Executor, filter: { name?: string } = {}): Promise<TestMachineRow[]> {
  return db
    .selectFrom('test_machines')
    .selectAll()
    .$if(!!filter.name, (q) => q.where('name', '=', filter.name!))
    .orderBy('name')
    .execute();
}

/** Inserts a machine unless its name is taken; false when it was (by a concurrent add, say). */
export async function insertTestMachine(db: Executor, machine: Insertable<TestMachinesTable>): Promise<boolean> {
  const row = await db
    .insertInto('test_machines')
    .values(machine)
    .onConflict((oc) => oc.doNothing())
    .returning('name')
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * C3: a removal locks the machine's row FOR UPDATE before it looks for holds; undefined when
 * it is not registered. A take locks it FOR KEY SHARE (lockTestMachineForTake), which conflicts
 * with this and with the delete, so a take and a removal serialize.
 */
export async function lockTestMachineForRemoval(db: Executor, name: string): Promise<TestMachineRow | undefined> {
  return db.selectFrom('test_machines').selectAll().where('name', '=', name).forUpdate().executeTakeFirst();
}

/**
 * C3: a take's lock on the machine's row (FOR KEY SHARE, through yoke_lock_test_machine: a user
 * may not lock the admins' table itself); false when the machine is not registered.
 */
export async function lockTestMachineForTake(db: Executor, name: string): Promise<boolean> {
  const { rows } = await sql<{ known: boolean }>`SELECT yoke_lock_test_machine(${name}) AS known`.execute(db);
  return rows[0]!.known;
}

/** Issue 3: a re-imaged machine's new host key replaces the pinned one; the machine and its line stay. */
export async function updateHostKey(
  db: Executor,
  name: string,
  key: { host_key: string; host_key_fingerprint: string; host_key_source: TestMachineRow['host_key_source'] },
): Promise<void> {
  await db.updateTable('test_machines').set(key).where('name', '=', name).execute();
}

export async function deleteTestMachine(db: Executor, name: string): Promise<void> {
  await db.deleteFrom('test_machines').where('name', '=', name).execute();
}

/** The machine's live hold; with `includeReserved: false`, a reserved turn nobody consumed yet does not count. */
export async function liveTestMachineHolder(db: Executor, name: string, opts: { includeReserved: boolean }) {
  return db
    .selectFrom('work_claims')
    .select(['claim_id', 'session_id', 'claimed_at', 'reserved_until'])
    .where('target_kind', '=', 'qa_admission')
    .where(sql<string>`scope->>'test_machine'`, '=', name)
    .where('released_at', 'is', null)
    .$if(!opts.includeReserved, (q) => q.where('reserved_until', 'is', null))
    .executeTakeFirst();
}

/** The newest check of a kind, or the newest passed one. */
export async function lastCheck(
  db: Executor,
  testMachine: string,
  kind: CheckKind,
  opts: { passedOnly: boolean },
): Promise<CheckRow | undefined> {
  return db
    .selectFrom('test_machine_checks')
    .selectAll()
    .where('test_machine', '=', testMachine)
    .where('kind', '=', kind)
    .$if(opts.passedOnly, (q) => q.where('passed', '=', true))
    .orderBy('finished_at', 'desc')
    .orderBy('check_id', 'desc')
    .limit(1)
    .executeTakeFirst();
}

/**
 * Records a check once: a retried record (same request id) finds its own row. A check given
 * no start started now, by the database's clock.
 */
export async function insertCheck(
  db: Executor,
  check: Omit<Insertable<TestMachineChecksTable>, 'started_at'> & { started_at?: Date | string },
): Promise<void> {
  await db
    .insertInto('test_machine_checks')
    .values({ ...check, started_at: check.started_at ?? sql<Date>`clock_timestamp()` })
    .onConflict((oc) => oc.column('request_id').doNothing())
    .execute();
}

export async function checkByRequestId(db: Executor, requestId: string): Promise<CheckRow | undefined> {
  return db.selectFrom('test_machine_checks').selectAll().where('request_id', '=', requestId).executeTakeFirst();
}
