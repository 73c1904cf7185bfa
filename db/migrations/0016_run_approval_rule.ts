import { Kysely, sql } from 'kysely';

/**
 * Issue 13: an approval is the approval stage's row written by the approver (`deployment-runs
 * approve` records who approved on the waiting stage; the worker then passes it), so every
 * user change to an approval stage follows the strict R1 rule (the driver or a steering seat),
 * not only the move to passed that 0016_row_security named.
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
        ELSIF TG_OP = 'UPDATE' AND row_new->>'status' IN ('passed', 'failed')
              AND (row_new - 'status' - 'updated_at') = (row_old - 'status' - 'updated_at') THEN
          RETURN NEW;
        END IF;
      ELSIF TG_TABLE_NAME = 'deployment_run_stages' AND coalesce(row_new->>'kind', row_old->>'kind') = 'approval' THEN
        seat_rule := true; doing := 'approve stage ' || (row_new->>'name');
      END IF;
      PERFORM yoke_require_run_authority(run, seat_rule, doing);
      RETURN coalesce(NEW, OLD);
    END $fn$;
  `.execute(db);
}

export async function down(): Promise<void> {
  // The earlier rule is a subset of this one; nothing to restore.
}
