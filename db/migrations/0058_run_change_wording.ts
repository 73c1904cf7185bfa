import { Kysely, sql } from 'kysely';

/**
 * Issue 13 (R1): a user's UPDATE of a run it may not change was refused as "bob cannot change
 * on run run-14: ...", the verb without its object. The refusal now reads "cannot make changes
 * on run run-14"; the rule is 0016's, unchanged.
 */
const authority = (doing: string) =>
  sql.raw(`
    CREATE OR REPLACE FUNCTION deployment_runs_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      PERFORM yoke_require_run_authority(OLD.run_id, false, '${doing}');
      IF NEW.driver_session_id IS DISTINCT FROM OLD.driver_session_id AND NEW.driver_session_id IS NOT NULL
         AND yoke_session_actor(NEW.driver_session_id) IS DISTINCT FROM session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('%s cannot attach session %s of another actor as the driver of run %s', session_user, NEW.driver_session_id, OLD.run_id),
          'drive with your own session');
      END IF;
      RETURN NEW;
    END $fn$;`);

export async function up(db: Kysely<any>): Promise<void> {
  await authority('make changes').execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await authority('change').execute(db);
}
