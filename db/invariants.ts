import { sql } from 'kysely';
import { TERMINAL_RUN_STATUSES } from '../domain/runStatuses';
import type { Executor } from './pool';

/** The event settlement records when it closes a member (activities/completion/doneGate.ts). */
export const MEMBER_CLOSED_EVENT = 'ItemDone';

/**
 * The invariant queries `yoke doctor` runs. Each returns the rows that break it; an empty
 * answer means the invariant holds. The database enforces most of these by construction; the
 * queries prove it after faults (a killed worker, an outage) and name what a bug left behind.
 */

/** Two live claims on one exclusivity unit (C3). */
export async function doubleClaimHolders(db: Executor) {
  const { rows } = await sql<{ unit: string; claim_ids: number[] }>`
    SELECT coalesce(key, target_kind || ':' || scope::text) AS unit, array_agg(claim_id ORDER BY claim_id) AS claim_ids
      FROM work_claims
     WHERE released_at IS NULL
     GROUP BY 1
    HAVING count(*) > 1`.execute(db);
  return rows;
}

/** Two executing runs occupying one origin (O1, O2). */
export async function doubleOccupiedUnits(db: Executor) {
  const { rows } = await sql<{ unit: string; run_ids: string[] }>`
    SELECT o.unit, array_agg(r.run_id ORDER BY r.run_id) AS run_ids
      FROM deployment_run_occupancy o
      JOIN deployment_runs r ON r.run_id = o.run_id
     WHERE r.status = 'executing' AND r.occupancy_released_at IS NULL
     GROUP BY o.unit
    HAVING count(*) > 1`.execute(db);
  return rows;
}

/** A row of a run that occupies its origin, not marked live: the occupancy check would miss it (O1). */
export async function occupyingRowsNotLive(db: Executor) {
  const { rows } = await sql<{ run_id: string; unit: string }>`
    SELECT o.run_id, o.unit
      FROM deployment_run_occupancy o
      JOIN deployment_runs r ON r.run_id = o.run_id
     WHERE NOT o.live AND yoke_run_occupies(r.status, r.supersedes_run_id, r.occupancy_released_at)
     ORDER BY o.run_id, o.unit`.execute(db);
  return rows;
}

/** A terminal run whose occupancy was never released. */
export async function terminalRunsOccupying(db: Executor) {
  return db
    .selectFrom('deployment_runs as r')
    .innerJoin('deployment_run_occupancy as o', 'o.run_id', 'r.run_id')
    .select(['r.run_id', 'r.status', 'o.unit'])
    .where('r.status', 'in', TERMINAL_RUN_STATUSES)
    .where('r.occupancy_released_at', 'is', null)
    .orderBy('r.run_id')
    .execute();
}

/** Executing runs and the walk each one's workflow must run. */
export async function executingRuns(db: Executor) {
  return db
    .selectFrom('deployment_runs')
    .select(['run_id', 'walk'])
    .where('status', '=', 'executing')
    .orderBy('run_id')
    .execute();
}

/** QA plan executions still running by Postgres (each must have a running workflow). */
export async function runningExecutions(db: Executor, onlyId?: number) {
  let q = db
    .selectFrom('qa_plan_executions as e')
    .leftJoin('backlog_items as i', 'i.item_id', 'e.item_id')
    .leftJoin('projects as ip', 'ip.project_id', 'i.project_id')
    .select(['e.execution_id', 'e.run_id', 'e.stage_name', 'e.plan_id', 'e.held_claim_id'])
    .select(sql<string | null>`ip.item_prefix || '-' || i.number`.as('item'))
    // seconds since it began: `qa begin` commits the execution before it starts the workflow
    .select(sql<number>`extract(epoch FROM clock_timestamp() - e.began_at)::float8`.as('age_s'))
    .where('e.status', '=', 'running')
    .orderBy('e.execution_id');
  if (onlyId !== undefined) q = q.where('e.execution_id', '=', onlyId);
  return q.execute();
}

/** A reserved turn whose claim row is gone or released (W7). */
export async function reservedWaitsWithoutClaim(db: Executor) {
  return db
    .selectFrom('qa_test_machine_waits as w')
    .leftJoin('work_claims as c', 'c.claim_id', 'w.claim_id')
    .select(['w.wait_id', 'w.test_machine', 'w.session_id', 'w.claim_id'])
    .where('w.state', '=', 'reserved')
    .where((eb) => eb.or([eb('c.claim_id', 'is', null), eb('c.released_at', 'is not', null)]))
    .orderBy('w.wait_id')
    .execute();
}

/** An open wait (waiting or reserved) of a session that has ended or was terminated. */
export async function waitsOfEndedSessions(db: Executor) {
  return db
    .selectFrom('qa_test_machine_waits as w')
    .innerJoin('sessions as s', 's.session_id', 'w.session_id')
    .select(['w.wait_id', 'w.test_machine', 'w.session_id', 'w.state'])
    .where('w.state', 'in', ['waiting', 'reserved'])
    .where((eb) => eb.or([eb('s.ended_at', 'is not', null), eb('s.terminated_at', 'is not', null)]))
    .orderBy('w.wait_id')
    .execute();
}

/**
 * A member closed twice: settlement's close-out writes one ItemDone event (naming the run it
 * closes through) per member it moves to done (activities/completion/doneGate.ts); two for one
 * item in one run mean a replay closed it again.
 */
export async function membersClosedTwice(db: Executor) {
  const { rows } = await sql<{ run_id: string; item: string; closes: number }>`
    SELECT payload->>'run_id' AS run_id, payload->>'item' AS item, count(*)::int AS closes
      FROM events
     WHERE event_type = ${MEMBER_CLOSED_EVENT} AND payload ? 'run_id'
     GROUP BY 1, 2
    HAVING count(*) > 1`.execute(db);
  return rows;
}
