import { Kysely, sql } from 'kysely';

/**
 * C5, C3: a claim's take serializes with its session's end and, for a QA host, with the
 * machine's removal, on their rows. An end locks the session row FOR UPDATE before it releases
 * the session's claims; a removal locks the machine row FOR UPDATE before it looks for holds.
 *
 * yoke_take_guard runs in the one-statement take for the row it has just inserted, and only then
 * (a refused take writes nothing, so it locks nothing either): it locks the session row, and the
 * machine's, FOR KEY SHARE (the weakest lock that conflicts with FOR UPDATE and the delete, so
 * takes never wait for each other; the claim's foreign key takes the same one on the session
 * anyway). It is VOLATILE, so it reads the newest committed rows, not its statement's
 * snapshot: an end or removal that committed after the take began is seen, and one in progress
 * is waited for. Either way the session has ended (or the machine is gone): the take is refused
 * (YK001, undoing its insert) rather than leaving a hold the end did not release or a hold on
 * no machine. One that comes after waits for the take's commit, and sees its claim.
 *
 * yoke_lock_test_machine is the machine lock alone, for the take through the waiting line. Both
 * are SECURITY DEFINER: a row lock asks for UPDATE privilege, which a user does not have on
 * test_machines (0016: machines are admins').
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_lock_test_machine(machine text) RETURNS boolean
      VOLATILE LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    BEGIN
      PERFORM 1 FROM test_machines WHERE name = machine FOR KEY SHARE;
      RETURN FOUND;
    END $fn$;

    CREATE FUNCTION yoke_take_guard(taker text, machine text) RETURNS boolean
      VOLATILE LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    BEGIN
      PERFORM 1 FROM sessions WHERE session_id = taker AND ended_at IS NULL AND terminated_at IS NULL
        FOR KEY SHARE;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'session % ended while its take was in flight', taker
          USING ERRCODE = 'YK001', DETAIL = 'session_ended', HINT = 'register a new session and take it again';
      END IF;
      IF machine IS NOT NULL AND NOT yoke_lock_test_machine(machine) THEN
        RAISE EXCEPTION 'test machine % was removed while its take was in flight', machine
          USING ERRCODE = 'YK001', DETAIL = 'test_machine_unknown', HINT = 'see yoke test-machine list';
      END IF;
      RETURN true;
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP FUNCTION yoke_take_guard(text, text);
    DROP FUNCTION yoke_lock_test_machine(text);
  `.execute(db);
}
