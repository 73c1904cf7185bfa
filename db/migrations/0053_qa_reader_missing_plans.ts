import { Kysely, sql } from 'kysely';

/**
 * Q1 Q4: the blocking-QA reader returns, beside each member's blocker texts, the ids of the plans
 * that have no passed execution for it (missing_plans). The recovery a member is shown (its own
 * `qa begin ... --item`) is built from those ids, so it no longer depends on the wording of the
 * blocker text it used to be parsed out of.
 *
 * As in 0026_qa_reader_pinned_flow, the stored definition is rewritten in place, each fragment
 * expected exactly once, and down() applies the reverse rewrites, so the restored function is the
 * previous one exactly. The result type changes, so the function is dropped and created again
 * in the same transaction.
 */
const REWRITES: [previous: string, next: string][] = [
  ['blockers text[])', 'blockers text[], missing_plans text[])'],
  ['SELECT r.stage_name, mb.item, r.blocker\n', 'SELECT r.stage_name, mb.item, r.blocker, NULL::text AS plan_id\n'],
  ["' running (plan ' || e.plan_id || ')'\n", "' running (plan ' || e.plan_id || ')', NULL::text\n"],
  ["' has no passed execution'\n", "' has no passed execution', pc.plan_id\n"],
  [
    'AS blockers\n',
    'AS blockers,\n' +
      '               coalesce(array_agg(mb.plan_id ORDER BY mb.plan_id COLLATE "C") FILTER (WHERE mb.plan_id IS NOT NULL),\n' +
      '                        ARRAY[]::text[]) AS missing_plans\n',
  ],
  ['q.status, ARRAY[]::text[]\n', 'q.status, ARRAY[]::text[], ARRAY[]::text[]\n'],
];

async function rewrite(db: Kysely<any>, pairs: [from: string, to: string][]): Promise<void> {
  const { rows } = await sql<{ def: string }>`
    SELECT pg_get_functiondef('deployment_qa_stage_outstanding(text, text)'::regprocedure) AS def
  `.execute(db);
  let def = rows[0]!.def;
  for (const [from, to] of pairs) {
    const at = def.indexOf(from);
    if (at < 0 || def.indexOf(from, at + 1) >= 0)
      throw new Error(
        `deployment_qa_stage_outstanding: expected ${JSON.stringify(from)} exactly once in its definition`,
      );
    def = def.replace(from, to);
  }
  await sql`DROP FUNCTION deployment_qa_stage_outstanding(text, text)`.execute(db);
  await sql.raw(def).execute(db);
}

export async function up(db: Kysely<any>): Promise<void> {
  await rewrite(db, REWRITES);
}

export async function down(db: Kysely<any>): Promise<void> {
  await rewrite(
    db,
    REWRITES.map(([previous, next]) => [next, previous]),
  );
}
