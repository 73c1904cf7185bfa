import { Kysely, sql } from 'kysely';

/** The claim primitives the board shows that had no way to be taken (issue 15). */
const NEW_KINDS = ['path_claim', 'strategy_doc_claim'];

/**
 * Path claims and strategy-document locks join work_claims (C1), and every primitive the
 * board renders gets a unique partial index over its exclusivity unit (C3): an epic task per
 * (item, task), a process per (project, process key), a path per (project, path), a document
 * per (project, document).
 */
export async function up(db: Kysely<any>): Promise<void> {
  // Other branches widen the same CHECK: keep whatever kinds it lists now and add ours.
  const { rows } = await sql<{ conname: string; def: string }>`
    SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
     WHERE conrelid = 'work_claims'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%target_kind%'`.execute(
    db,
  );
  const kinds = new Set(NEW_KINDS);
  for (const r of rows) {
    for (const m of r.def.matchAll(/'([a-z_]+)'/g)) kinds.add(m[1]!);
    await sql`ALTER TABLE work_claims DROP CONSTRAINT ${sql.id(r.conname)}`.execute(db);
  }
  const list = sql.join([...kinds].sort().map((k) => sql.lit(k)));
  await sql`ALTER TABLE work_claims ADD CONSTRAINT work_claims_target_kind_check CHECK (target_kind IN (${list}))`.execute(
    db,
  );
  await sql`
    CREATE UNIQUE INDEX work_claims_live_epic_task ON work_claims (item_id, (scope->>'task'))
      WHERE target_kind = 'epic_task' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_process ON work_claims ((scope->>'project_id'), (scope->>'process_key'))
      WHERE target_kind = 'process' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_path ON work_claims ((scope->>'project_id'), (scope->>'path'))
      WHERE target_kind = 'path_claim' AND released_at IS NULL;
    CREATE UNIQUE INDEX work_claims_live_strategy_doc ON work_claims ((scope->>'project_id'), (scope->>'document'))
      WHERE target_kind = 'strategy_doc_claim' AND released_at IS NULL;
    -- The board's one read: every claim of a recent session, and sessions by when they ended.
    CREATE INDEX work_claims_session_claimed ON work_claims (session_id, claimed_at);
    CREATE INDEX sessions_ended ON sessions ((coalesce(ended_at, terminated_at)));
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP INDEX work_claims_live_epic_task, work_claims_live_process, work_claims_live_path,
               work_claims_live_strategy_doc, work_claims_session_claimed, sessions_ended;
  `.execute(db);
}
