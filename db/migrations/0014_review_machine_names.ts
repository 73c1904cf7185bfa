import { sql, type Kysely } from 'kysely';

/**
 * C3: machine names are case-insensitive and kept lower-case. Rows written before the rule
 * are brought to it; two machines that differ only by case are one machine, which an
 * operator must resolve first (the migration says which).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    DO $$
    DECLARE clash text;
    BEGIN
      SELECT string_agg(name, ', ') INTO clash FROM test_machines
       WHERE lower(name) IN (SELECT lower(name) FROM test_machines GROUP BY lower(name) HAVING count(*) > 1);
      IF clash IS NOT NULL THEN
        RAISE EXCEPTION 'test machines % differ only by case (C3: one machine, one name); remove all but one with yoke test-machine remove NAME, then migrate again', clash;
      END IF;
    END $$;
    UPDATE test_machines SET name = lower(name) WHERE name <> lower(name);
    UPDATE test_machine_checks SET test_machine = lower(test_machine) WHERE test_machine <> lower(test_machine);
    UPDATE qa_test_machine_waits SET test_machine = lower(test_machine) WHERE test_machine <> lower(test_machine);
    UPDATE work_claims
       SET scope = jsonb_set(scope, '{test_machine}', to_jsonb(lower(scope->>'test_machine'))),
           key = 'QA_HOST:' || lower(scope->>'test_machine')
     WHERE target_kind = 'qa_admission' AND scope->>'test_machine' <> lower(scope->>'test_machine');
  `.execute(db);
}

export async function down(): Promise<void> {
  // the original spellings are not kept: lower-case names are valid under every earlier rule
}
