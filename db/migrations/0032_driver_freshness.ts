import { Kysely, sql } from 'kysely';

/** yoke_run_refusal (0016_row_security) with the driver's freshness read from `fresh`. */
const runRefusal = (fresh: string) => sql`
    CREATE OR REPLACE FUNCTION yoke_run_refusal(run text, seat_rule boolean) RETURNS text STABLE LANGUAGE plpgsql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
    DECLARE r deployment_runs; live boolean;
    BEGIN
      IF yoke_is_service() THEN RETURN NULL; END IF;
      SELECT * INTO r FROM deployment_runs WHERE run_id = run;
      IF NOT FOUND THEN RETURN NULL; END IF;
      live := r.driver_session_id IS NOT NULL AND r.driver_heartbeat_at > now() - ${sql.raw(fresh)}
        AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = r.driver_session_id AND s.ended_at IS NULL AND s.terminated_at IS NULL);
      IF (live AND yoke_session_actor(r.driver_session_id) = session_user) OR yoke_holds_seat(r.project_id) THEN RETURN NULL; END IF;
      IF live THEN RETURN 'run_driven_elsewhere'; END IF;
      IF seat_rule THEN RETURN 'steering_seat_required'; END IF;
      IF yoke_may_deploy(r.project_id) THEN RETURN NULL; END IF;
      RETURN 'permission_denied';
    END $fn$;
`;

/**
 * Issue 4, R1, issue 13: how long a driver's heartbeat keeps its attachment live is one
 * setting of the deployment, honoured by Postgres and the CLI alike. 0016_row_security wrote
 * ten minutes into yoke_run_refusal while the CLI read YOKE_DRIVER_FRESH_SECONDS, so with a
 * shorter setting the CLI let a second actor take a lapsed run and Postgres refused it.
 *
 * - deployment_settings holds one row; everyone reads it, only admins and the worker write it
 *   (the default policies of every new table): a user cannot shorten it for himself to take a
 *   run from its driver. The worker writes its YOKE_DRIVER_FRESH_SECONDS there when it starts
 *   (`npm start` runs one); the CLI reads it from there (activities/deploymentSettings.ts).
 * - yoke_run_refusal reads it, and its refusal names the driver: run_driven_elsewhere carries
 *   the driver's session and actor, its last heartbeat and when the attachment lapses, in the
 *   refusal's details as the CLI's own refusal does (yoke_refuse_with: the details ride in
 *   the HINT after the recovery, on a line of their own; domain/sqlRefusal.ts reads them).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE deployment_settings (
      singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      driver_fresh_seconds double precision NOT NULL DEFAULT 600 CHECK (driver_fresh_seconds > 0),
      updated_at timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO deployment_settings DEFAULT VALUES;

    CREATE FUNCTION yoke_driver_fresh() RETURNS interval STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT coalesce((SELECT make_interval(secs => driver_fresh_seconds) FROM deployment_settings), interval '10 minutes')
    $fn$;
  `.execute(db);
  await runRefusal('yoke_driver_fresh()').execute(db);
  await sql`
    CREATE FUNCTION yoke_refuse_with(code text, message text, recovery text, details jsonb) RETURNS void LANGUAGE plpgsql AS $fn$
    BEGIN
      RAISE EXCEPTION USING ERRCODE = 'YK001', MESSAGE = message, DETAIL = code,
        HINT = recovery || E'\\ndetails: ' || details::text;
    END $fn$;

    CREATE OR REPLACE FUNCTION yoke_require_run_authority(run text, seat_rule boolean, doing text) RETURNS void LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    DECLARE code text := yoke_run_refusal(run, seat_rule); r deployment_runs; project text; driver_actor text; lapses timestamptz;
    BEGIN
      IF code IS NULL THEN RETURN; END IF;
      SELECT * INTO r FROM deployment_runs WHERE run_id = run;
      SELECT name INTO project FROM projects WHERE project_id = r.project_id;
      IF code = 'run_driven_elsewhere' THEN
        driver_actor := yoke_session_actor(r.driver_session_id);
        lapses := r.driver_heartbeat_at + yoke_driver_fresh();
        PERFORM yoke_refuse_with(code,
          format('%s cannot %s on run %s: it is driven by session %s of actor %s (heartbeat %s)', session_user, doing, run,
            r.driver_session_id, driver_actor, r.driver_heartbeat_at),
          format('ask its driver (session %s, actor %s), or take the steering seat: yoke claims steering take --project %s; otherwise the attachment lapses at %s unless it heartbeats again',
            r.driver_session_id, driver_actor, project, lapses),
          jsonb_build_object('run_id', run, 'driver_session_id', r.driver_session_id, 'driver_actor_id', driver_actor,
            'driver_heartbeat_at', r.driver_heartbeat_at, 'lapses_at', lapses, 'actor_id', session_user));
      END IF;
      PERFORM yoke_refuse_with(code, format('%s cannot %s on run %s: %s', session_user, doing, run,
          CASE code WHEN 'steering_seat_required' THEN 'it has no live driver and you hold no steering seat on its project'
                    ELSE 'you may not deploy its project' END),
        CASE code WHEN 'steering_seat_required' THEN 'take the steering seat: yoke claims steering take --project ' || project
                  ELSE format('ask an admin for the runs.deploy grant: yoke projects grant %s --actor %s --permission runs.deploy', project, session_user) END,
        jsonb_build_object('run_id', run, 'project', project, 'actor_id', session_user));
    END $fn$;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await runRefusal("interval '10 minutes'").execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION yoke_require_run_authority(run text, seat_rule boolean, doing text) RETURNS void LANGUAGE plpgsql
      SET search_path = public, pg_temp AS $fn$
    DECLARE code text := yoke_run_refusal(run, seat_rule);
    BEGIN
      IF code IS NULL THEN RETURN; END IF;
      PERFORM yoke_refuse(code, format('%s cannot %s on run %s: %s', session_user, doing, run,
        CASE code WHEN 'run_driven_elsewhere' THEN 'another actor''s live driver attachment owns it'
                  WHEN 'steering_seat_required' THEN 'it has no live driver and you hold no steering seat on its project'
                  ELSE 'you may not deploy its project' END),
        CASE code WHEN 'run_driven_elsewhere' THEN 'ask its driver, or take the project''s steering seat: yoke claims steering take --project P'
                  WHEN 'steering_seat_required' THEN 'take the steering seat: yoke claims steering take --project P'
                  ELSE 'ask an admin for the runs.deploy grant: yoke projects grant P --actor A --permission runs.deploy' END);
    END $fn$;
    DROP FUNCTION yoke_refuse_with(text, text, text, jsonb), yoke_driver_fresh();
    DROP TABLE deployment_settings;
  `.execute(db);
}
