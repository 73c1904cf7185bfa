import { Kysely, sql } from 'kysely';

/**
 * Issue 16, claims: what the service's acquire and release still paid for rules that are not
 * theirs, and for the release's view.
 *
 * 1. Every statement that writes a claim prepares the WHEN clause of each of the table's user-only
 *    triggers again (Postgres parses and plans a trigger's WHEN on every execution, prepared or
 *    not): two per acquire, four per release. Each clause spelled the role test out (two
 *    `pg_has_role` calls on `name` constants, about 1,400 characters of stored expression to read
 *    back). They now call `yoke_acts_as_user()`, the same test in a plpgsql function, which keeps
 *    its compiled body for the connection's life: the bare INSERT / UPDATE pair on `work_claims`
 *    measured 8 % less backend CPU (the same pair with no user-only trigger at all: 18 %). What
 *    each trigger does, and when, is unchanged.
 * 2. `yoke_release_claim` replaces `yoke_release_serving_line` (0034_lean_claim_path) for the
 *    common release. It returns the claim view itself (the release already knows the holder's
 *    actor: the acting actor, or the release is not its to make), where the caller joined the
 *    function's rows to sessions, items and projects. The line is checked by one existence test
 *    folded into the release's UPDATE: a release whose line has no wait at all (every release of
 *    a test machine nobody queues for) writes in that one statement. Only when a wait exists is
 *    the line read in full, as before (W9: a reserved turn or a wait of an ended session is the
 *    full path's; otherwise the oldest live waiter is served, W7, W8). The line's lock is still
 *    taken first, in its own statement, so the UPDATE's snapshot sees every wait a join inserted
 *    under it (activities/waitingLine.ts joinLine). What the release answers is unchanged.
 *    Every name in it is schema-qualified instead of a SET search_path clause, which made each
 *    call save and restore the setting (as 0019_cheap_checks did for yoke_is_service). The old
 *    function stays for processes of the previous build until they restart.
 */
/** The role test for a user (neither admin nor worker), written out so a trigger's WHEN calls no function. */
export const user = `NOT (pg_catalog.pg_has_role(session_user, 'yoke_admin', 'MEMBER') OR pg_catalog.pg_has_role(session_user, 'yoke_worker', 'MEMBER'))`;

/** The six user-only triggers of work_claims, each with its WHEN beside the role test. */
const triggers = (actsAsUser: string) =>
  sql.raw(
    [
      ['work_claims_authority', 'INSERT', '', 'work_claims_authority'],
      ['work_claims_take_rules', 'INSERT', '', 'work_claims_take_rules'],
      ['work_claims_authority_update', 'UPDATE', ' AND NOT yoke_delivered_release(OLD, NEW)', 'work_claims_authority'],
      [
        'work_claims_delivered_release',
        'UPDATE',
        ' AND yoke_delivered_release(OLD, NEW)',
        'work_claims_delivered_release',
      ],
      ['work_claims_history_kept', 'UPDATE', ' AND OLD.released_at IS NOT NULL', 'work_claims_history_kept'],
      [
        'work_claims_operator_event',
        'UPDATE',
        ' AND NOT yoke_delivered_release(OLD, NEW)',
        'work_claims_operator_event',
      ],
    ]
      .map(
        ([name, event, also, fn]) => `
    DROP TRIGGER ${name} ON work_claims;
    CREATE TRIGGER ${name} BEFORE ${event} ON work_claims FOR EACH ROW
      WHEN (${actsAsUser}${also}) EXECUTE FUNCTION ${fn}();`,
      )
      .join(''),
  );

/** The common release (0050_claimperf_json_pair replaces its first statements). */
export const releaseClaimFunction = `
    CREATE FUNCTION yoke_release_claim(claim integer, acting text, reason text, lifetime_ms double precision)
      RETURNS SETOF yoke_claim_view VOLATILE LANGUAGE plpgsql ROWS 2 AS $fn$
    DECLARE v public.yoke_claim_view; machine text; w record;
            line_read boolean := false; unusual boolean; waiting boolean := false;
    BEGIN
      SELECT x.scope->>'test_machine' INTO machine FROM public.work_claims x WHERE x.claim_id = claim AND x.target_kind = 'qa_admission';
      -- The line before the claim row: the lock order of every path (db/waits.ts).
      IF machine IS NOT NULL THEN PERFORM pg_advisory_xact_lock(hashtextextended('qa_line:' || machine, 0)); END IF;
      LOOP
        UPDATE public.work_claims x
           SET released_at = clock_timestamp(), release_reason = reason,
               released_by_session_id = acting, released_by_actor_id = a.actor_id
          FROM public.sessions a
         WHERE a.session_id = acting AND a.ended_at IS NULL AND a.terminated_at IS NULL
           AND x.claim_id = claim AND x.released_at IS NULL AND x.reserved_until IS NULL
           AND (x.session_id = acting
                OR EXISTS (SELECT 1 FROM public.sessions h WHERE h.session_id = x.session_id AND h.actor_id = a.actor_id))
           AND (line_read OR machine IS NULL
                OR NOT EXISTS (SELECT 1 FROM public.qa_test_machine_waits q
                                WHERE q.test_machine = machine AND q.state IN ('waiting', 'reserved')))
        RETURNING x.claim_id, x.key, x.target_kind, x.scope, x.project_id,
                  (SELECT p.name FROM public.projects p WHERE p.project_id = x.project_id), x.item_id,
                  (SELECT ip.item_prefix || '-' || i.number FROM public.backlog_items i JOIN public.projects ip ON ip.project_id = i.project_id
                    WHERE i.item_id = x.item_id),
                  -- the holder's actor: the acting session's, or the release is not the acting session's to make
                  x.session_id, a.actor_id, x.claimed_at, x.heartbeat_at, x.released_at, x.release_reason,
                  x.released_by_session_id, x.released_by_actor_id, x.reserved_until, NULL::integer, x.qa_plan_execution_id
          INTO v;
        EXIT WHEN FOUND OR line_read OR machine IS NULL;
        -- Not released: the claim is not this release's (the full path answers), or its line has a wait.
        -- W9: a reserved turn or a wait of an ended session is the full path's; else, is anyone waiting.
        SELECT coalesce(bool_or(q.state = 'reserved' OR s.ended_at IS NOT NULL OR s.terminated_at IS NOT NULL), false),
               coalesce(bool_or(q.state = 'waiting'), false)
          INTO unusual, waiting
          FROM public.qa_test_machine_waits q JOIN public.sessions s ON s.session_id = q.session_id
         WHERE q.test_machine = machine AND q.state IN ('waiting', 'reserved');
        IF unusual OR NOT waiting THEN RETURN; END IF;
        line_read := true;
      END LOOP;
      IF NOT FOUND THEN RETURN; END IF;
      RETURN NEXT v;
      IF NOT waiting OR public.test_machine_unhealthy(machine) THEN RETURN; END IF;  -- nobody to serve, or W8
      SELECT q.wait_id AS id, q.session_id, q.qa_plan_execution_id, s.project_id, s.actor_id INTO w
        FROM public.qa_test_machine_waits q JOIN public.sessions s ON s.session_id = q.session_id
       WHERE q.test_machine = machine AND q.state = 'waiting'
       ORDER BY q.queued_at, q.wait_id
       LIMIT 1;
      IF NOT FOUND THEN RETURN; END IF;
      INSERT INTO public.work_claims AS n (target_kind, scope, key, project_id, session_id, qa_plan_execution_id, reserved_until)
      VALUES ('qa_admission', jsonb_build_object('test_machine', machine), 'QA_HOST:' || machine, w.project_id,
              w.session_id, w.qa_plan_execution_id, clock_timestamp() + make_interval(secs => lifetime_ms / 1000))
      ON CONFLICT DO NOTHING
      RETURNING n.claim_id, n.key, n.target_kind, n.scope, n.project_id,
                (SELECT p.name FROM public.projects p WHERE p.project_id = n.project_id), n.item_id, NULL::text,
                n.session_id, w.actor_id, n.claimed_at, n.heartbeat_at, n.released_at, n.release_reason,
                n.released_by_session_id, n.released_by_actor_id, n.reserved_until, w.id, n.qa_plan_execution_id
        INTO v;
      IF NOT FOUND THEN RETURN; END IF;  -- taken meanwhile by an acquirer outside the line
      UPDATE public.qa_test_machine_waits q SET state = 'reserved', claim_id = v.claim_id, settled_at = NULL, cancel_reason = NULL
       WHERE q.wait_id = w.id;
      RETURN NEXT v;
    END $fn$;
`;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE FUNCTION yoke_acts_as_user() RETURNS boolean STABLE LANGUAGE plpgsql AS $fn$
    BEGIN
      RETURN ${sql.raw(user)};
    END $fn$;
  `.execute(db);
  await triggers('yoke_acts_as_user()').execute(db);
  await sql`
    CREATE TYPE yoke_claim_view AS (
      claim_id integer, key text, target_kind text, scope jsonb, project_id integer, project text,
      item_id integer, item text, session_id text, actor_id text, claimed_at timestamptz,
      heartbeat_at timestamptz, released_at timestamptz, release_reason text, released_by_session_id text,
      released_by_actor_id text, reserved_until timestamptz, wait_id integer, qa_plan_execution_id integer);

    ${sql.raw(releaseClaimFunction)}
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP FUNCTION yoke_release_claim(integer, text, text, double precision);
    DROP TYPE yoke_claim_view;
  `.execute(db);
  await triggers(user).execute(db);
  await sql`DROP FUNCTION yoke_acts_as_user()`.execute(db);
}
