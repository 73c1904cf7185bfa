import { Kysely, sql } from 'kysely';

/**
 * Issue 16: two checks that every claim statement runs cost more than the statement's own
 * work, because a SQL function that cannot be inlined has its body parsed and planned again
 * in every transaction (measured on 2 cores under load: about 0.3 ms for yoke_is_service, 0.4
 * to 0.9 ms for test_machine_unhealthy, against about 0.2 ms for the bare INSERT they guard).
 *
 * - `yoke_is_service()` runs in every write trigger and every policy's service arm. The same
 *   rule as one inlinable expression measures about 0.5 µs. It means exactly what
 *   0016_actors said: a superuser is a member of every role (`pg_has_role(..., 'MEMBER')` is
 *   true for one), so "superuser or member of yoke_admin" is membership of yoke_admin. Every
 *   name is schema-qualified, which is what the dropped SET clause protected.
 * - `test_machine_unhealthy()` (W2, W8) guards every QA_HOST take: plpgsql keeps its plan for
 *   the connection's life. The rule is unchanged.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION yoke_is_admin() RETURNS boolean STABLE LANGUAGE sql AS $fn$
      SELECT pg_catalog.pg_has_role(session_user, 'yoke_admin', 'MEMBER')
    $fn$;
    ALTER FUNCTION yoke_is_admin() RESET ALL;
    CREATE OR REPLACE FUNCTION yoke_is_service() RETURNS boolean STABLE LANGUAGE sql AS $fn$
      SELECT pg_catalog.pg_has_role(session_user, 'yoke_admin', 'MEMBER')
          OR pg_catalog.pg_has_role(session_user, 'yoke_worker', 'MEMBER')
    $fn$;
    ALTER FUNCTION yoke_is_service() RESET ALL;

    CREATE OR REPLACE FUNCTION test_machine_unhealthy(machine text) RETURNS boolean STABLE LANGUAGE plpgsql AS $fn$
    BEGIN
      RETURN COALESCE((
        SELECT c.kind = 'verification' AND NOT c.passed
          FROM test_machine_checks c
         WHERE c.test_machine = machine AND (c.kind = 'verification' OR c.passed)
         ORDER BY c.finished_at DESC, c.check_id DESC
         LIMIT 1), false);
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION yoke_is_admin() RETURNS boolean STABLE LANGUAGE sql SET search_path = pg_catalog AS $fn$
      SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = session_user AND rolsuper)
          OR pg_has_role(session_user, 'yoke_admin', 'MEMBER')
    $fn$;
    CREATE OR REPLACE FUNCTION yoke_is_service() RETURNS boolean STABLE LANGUAGE sql SET search_path = pg_catalog AS $fn$
      SELECT public.yoke_is_admin() OR pg_has_role(session_user, 'yoke_worker', 'MEMBER')
    $fn$;
    CREATE OR REPLACE FUNCTION test_machine_unhealthy(machine text) RETURNS boolean STABLE LANGUAGE sql AS $fn$
      SELECT COALESCE((
        SELECT c.kind = 'verification' AND NOT c.passed
          FROM test_machine_checks c
         WHERE c.test_machine = machine AND (c.kind = 'verification' OR c.passed)
         ORDER BY c.finished_at DESC, c.check_id DESC
         LIMIT 1), false)
    $fn$;
  `.execute(db);
}
