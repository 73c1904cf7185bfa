import { Kysely, sql } from 'kysely';
import * as approvalRule from './0016_run_approval_rule';

/**
 * Issue 13, R1: a run-level QA verdict (passed or failed) is the run's live driver's or a
 * steering seat's call, as `deployment-runs qa-verdict` requires (activities/runs/stages.ts
 * recordQaVerdict). 0016_row_security let any user set a check to passed or failed by raw SQL
 * ("a QA runner's to record"), and its policy on deployment_run_qa was always true. The only
 * user-role writer of a verdict is that command; a plan execution answers its rows from the
 * worker (finishExecution). Now:
 *
 * - a user's move of a check to passed or failed (an insert with either too) follows the
 *   strict rule, refused run_driven_elsewhere or steering_seat_required like a waiver;
 * - a check moved from one run to another (takeover) needs the rule on both runs, so a
 *   verdict cannot be carried off another run into one's own;
 * - the policy on deployment_run_qa is the run's rule, as on the run's other parts.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION run_parts_authority() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    DECLARE row_new jsonb := CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE to_jsonb(NEW) END;
            row_old jsonb := CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE to_jsonb(OLD) END;
            run text := coalesce(row_new->>'run_id', row_old->>'run_id');
            seat_rule boolean := false; doing text := 'change ' || TG_TABLE_NAME;
    BEGIN
      IF yoke_is_service() THEN RETURN coalesce(NEW, OLD); END IF;
      IF TG_TABLE_NAME = 'deployment_run_qa' THEN
        IF row_new->>'status' = 'waived' AND (row_old IS NULL OR row_old->>'status' <> 'waived') THEN
          seat_rule := true; doing := 'waive QA check ' || (row_new->>'check_name');
        ELSIF TG_OP = 'INSERT' AND row_new->>'source' = 'operator' THEN
          seat_rule := true; doing := 'add QA check ' || (row_new->>'check_name');
        ELSIF row_new->>'status' IN ('passed', 'failed') AND row_new->>'status' IS DISTINCT FROM row_old->>'status' THEN
          seat_rule := true; doing := format('record %s on QA check %s', row_new->>'status', row_new->>'check_name');
        END IF;
      ELSIF TG_TABLE_NAME = 'deployment_run_stages' AND coalesce(row_new->>'kind', row_old->>'kind') = 'approval' THEN
        seat_rule := true; doing := 'approve stage ' || (row_new->>'name');
      END IF;
      IF TG_OP = 'UPDATE' AND row_new->>'run_id' IS DISTINCT FROM row_old->>'run_id' THEN
        PERFORM yoke_require_run_authority(row_old->>'run_id', seat_rule, doing || ' away from run ' || (row_old->>'run_id'));
      END IF;
      PERFORM yoke_require_run_authority(run, seat_rule, doing);
      RETURN coalesce(NEW, OLD);
    END $fn$;

    DROP POLICY yoke_user_write ON deployment_run_qa;
    CREATE POLICY yoke_user_write ON deployment_run_qa FOR ALL TO yoke_user USING (true)
      WITH CHECK (yoke_run_refusal(run_id, false) IS NULL);
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP POLICY yoke_user_write ON deployment_run_qa;
    CREATE POLICY yoke_user_write ON deployment_run_qa FOR ALL TO yoke_user USING (true)
      WITH CHECK (yoke_run_refusal(run_id, false) IS NULL OR 'deployment_run_qa' = 'deployment_run_qa');
  `.execute(db);
  await approvalRule.up(db);
}
