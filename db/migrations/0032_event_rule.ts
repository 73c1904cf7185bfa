import { Kysely, sql } from 'kysely';

/**
 * Issue 13: a user's event names what its command acted on. 0027_authority_holes narrowed user
 * events to the types users' commands write, but any user could still write them for any
 * project in another actor's session's name; a forged ItemDone then counted as a second close
 * of a member in `yoke doctor` (db/invariants.ts membersClosedTwice). Now a user's event:
 *
 * - names no session, or one of the caller's own (as every recordEvent under the CLI does);
 * - a run's event (every type but the two below) names an existing run of the event's
 *   project, on which the caller holds the run's R1 authority: the rule its command's own
 *   writes on that run met in the same transaction (create, execute, retry, membership,
 *   terminalize, QA, settlement, a done write closing a member, a takeover's successor);
 * - QaPlanExecutionBegun names an execution the caller began, on a run of the event's project;
 * - WARNOperatorLeaseRelease stays an operator's of its project (seat and claims.release).
 */
const RUN_EVENT_TYPES = [
  'DeploymentRunCreated',
  'DeploymentRunExecuting',
  'DeploymentRunRetried',
  'DeploymentRunItemAdded',
  'DeploymentRunItemRemoved',
  'DeploymentRunFailed',
  'DeploymentRunCancelled',
  'DeploymentRunStageStarted',
  'DeploymentRunTakenOver',
  'DeploymentRunQaAdded',
  'DeploymentRunSettling',
  'DeploymentRunSucceeded',
  'ItemDone',
];

/** 0027's list: every type a user's command writes. */
const USER_EVENT_TYPES = [...RUN_EVENT_TYPES, 'QaPlanExecutionBegun'];

const list = (types: string[]) => sql.raw(types.map((t) => `'${t}'`).join(', '));

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    -- The run exists in the project and the caller holds its R1 authority.
    CREATE FUNCTION yoke_acts_on_run(project integer, run text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM deployment_runs r WHERE r.run_id = run AND r.project_id = project)
        AND yoke_run_refusal(run, false) IS NULL
    $fn$;

    -- The caller began the execution, on a run of the project.
    CREATE FUNCTION yoke_began_execution(project integer, execution text) RETURNS boolean STABLE LANGUAGE sql
      SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
      SELECT EXISTS (SELECT 1 FROM qa_plan_executions e JOIN sessions s ON s.session_id = e.session_id
                       JOIN deployment_runs r ON r.run_id = e.run_id
                      WHERE e.execution_id::text = execution AND s.actor_id = session_user AND r.project_id = project)
    $fn$;

    DROP POLICY yoke_user_insert ON events;
    CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK (
      actor_id = session_user
      AND (session_id IS NULL OR yoke_session_actor(session_id) = session_user)
      AND ((event_type IN (${list(RUN_EVENT_TYPES)})
            AND yoke_acts_on_run(project_id, coalesce(payload->>'run_id', payload->>'successor_run_id')))
           OR (event_type = 'QaPlanExecutionBegun' AND yoke_began_execution(project_id, payload->>'execution_id'))
           OR (event_type = 'WARNOperatorLeaseRelease' AND yoke_holds_seat(project_id) AND yoke_has_grant(project_id, 'claims.release'))));
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP POLICY yoke_user_insert ON events;
    CREATE POLICY yoke_user_insert ON events FOR INSERT TO yoke_user WITH CHECK (
      actor_id = session_user
      AND (event_type IN (${list(USER_EVENT_TYPES)})
           OR (event_type = 'WARNOperatorLeaseRelease' AND yoke_holds_seat(project_id) AND yoke_has_grant(project_id, 'claims.release'))));
    DROP FUNCTION yoke_acts_on_run(integer, text), yoke_began_execution(integer, text);
  `.execute(db);
}
