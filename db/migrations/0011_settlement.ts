import { Kysely, sql } from 'kysely';

/**
 * Settlement and completion (S1-S6, D7-D10): item status with its delivery_evidence stamp
 * facts (rung, preflight, completed_deliveries), per-item completion flow selection,
 * dependencies (ordinary and environment-specific), the commit-phase markers on runs and
 * members, the per-member effect ledger of the effects phase, and the one completion-runs walk
 * (deployment_item_completion_runs) that the done gate, the item reads and source QA share.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE projects ADD COLUMN tracker jsonb;

    ALTER TABLE backlog_items
      ADD COLUMN status text NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'in_progress', 'delivery_ready', 'done', 'cancelled')),
      ADD COLUMN status_changed_at timestamptz,
      ADD COLUMN delivery_evidence jsonb NOT NULL DEFAULT '{}',
      ADD COLUMN completion_flow_id integer REFERENCES flows,
      ADD COLUMN tracker_issue integer,
      ADD COLUMN lane_path text;

    -- D7: environment '' is an ordinary dependency (done); a named one also needs attribution.
    CREATE TABLE item_dependencies (
      item_id             integer NOT NULL REFERENCES backlog_items,
      depends_on_item_id  integer NOT NULL REFERENCES backlog_items,
      environment         text NOT NULL DEFAULT '',
      PRIMARY KEY (item_id, depends_on_item_id, environment)
    );

    ALTER TABLE deployment_run_items
      ADD COLUMN delivered_source_sha text,
      ADD COLUMN closed_at timestamptz;

    ALTER TABLE deployment_runs
      ADD COLUMN settlement_committed_at timestamptz,
      ADD COLUMN settlement_blocked jsonb;

    -- S3: one row per member and effect; applied_at is the effect's exactly-once mark, and
    -- lease_until keeps two replays from applying the same effect at once.
    CREATE TABLE deployment_run_member_effects (
      run_id       text NOT NULL REFERENCES deployment_runs,
      item_id      integer NOT NULL REFERENCES backlog_items,
      effect       text NOT NULL CHECK (effect IN ('tracker_sync', 'lane_cleanup', 'holder_session_end')),
      attempts     integer NOT NULL DEFAULT 0,
      lease_until  timestamptz,
      applied_at   timestamptz,
      outcome      text,
      last_error   text,
      PRIMARY KEY (run_id, item_id, effect)
    );

    -- D8: the one completion-runs walk. A membership counts when its run is of the item's
    -- selected (else the project's default) completion flow, or is another project's run that
    -- recorded a bound source commit for the item. Newest first; read_run_id is the newest
    -- one, except that a failed or cancelled run never shadows a live, settling or succeeded one.
    CREATE VIEW deployment_item_completion_runs AS
    WITH walk AS (
      SELECT i.item_id, r.run_id, r.status, r.settling_at, r.project_id AS run_project_id, m.added_at,
             r.created_at, r.candidate_sha, m.delivered_source_sha,
             (r.status IN ('failed', 'cancelled')) AS dead
        FROM backlog_items i
        JOIN deployment_run_items m ON m.item_id = i.item_id
        JOIN deployment_runs r ON r.run_id = m.run_id
       WHERE (r.project_id = i.project_id AND r.flow_id = coalesce(
               i.completion_flow_id,
               (SELECT f.flow_id FROM flows f WHERE f.project_id = i.project_id AND f.completion_flow)))
          OR (r.project_id <> i.project_id AND m.delivered_source_sha IS NOT NULL)
    )
    SELECT item_id,
           jsonb_agg(jsonb_build_object(
             'run_id', run_id, 'status', status, 'settling', settling_at IS NOT NULL AND status = 'executing',
             'candidate_sha', candidate_sha, 'delivered_source_sha', delivered_source_sha,
             'added_at', added_at) ORDER BY added_at DESC, created_at DESC, run_id DESC) AS completion_runs,
           (array_agg(run_id ORDER BY dead, added_at DESC, created_at DESC, run_id DESC))[1] AS read_run_id
      FROM walk
     GROUP BY item_id;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP VIEW deployment_item_completion_runs;
    DROP TABLE deployment_run_member_effects, item_dependencies;
    ALTER TABLE deployment_runs DROP COLUMN settlement_committed_at, DROP COLUMN settlement_blocked;
    ALTER TABLE deployment_run_items DROP COLUMN delivered_source_sha, DROP COLUMN closed_at;
    ALTER TABLE backlog_items DROP COLUMN status, DROP COLUMN status_changed_at, DROP COLUMN delivery_evidence,
      DROP COLUMN completion_flow_id, DROP COLUMN tracker_issue, DROP COLUMN lane_path;
    ALTER TABLE projects DROP COLUMN tracker;
  `.execute(db);
}
