import { Kysely, sql } from 'kysely';

/**
 * Takeover (T1-T3): the project's git repository (where containment is read), one successor
 * per predecessor, and verdict_run_id on every recorded QA answer: the run that owned the
 * answered row or execution when the answer committed. A takeover moves rows to the successor
 * without touching this column, so a carried attempt keeps crediting the run that recorded it
 * (qa_verdict_owner_run). Triggers set it, so every writer of a verdict gets it for free.
 * It carries no foreign key on purpose: a key check would take a share lock on the run row
 * inside the verdict's transaction, and a takeover holding that run's row lock while it waits
 * for the execution's would deadlock with it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE projects ADD COLUMN repository text;

    CREATE UNIQUE INDEX deployment_runs_one_successor ON deployment_runs (supersedes_run_id)
      WHERE supersedes_run_id IS NOT NULL;

    ALTER TABLE deployment_run_qa ADD COLUMN verdict_run_id text;
    ALTER TABLE qa_plan_executions ADD COLUMN verdict_run_id text;
    ALTER TABLE qa_plan_execution_results ADD COLUMN verdict_run_id text;

    -- A run QA row's answer belongs to the run that held the row when the answer was written.
    CREATE FUNCTION deployment_run_qa_verdict_run() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF NEW.status = 'pending' THEN
        NEW.verdict_run_id := NULL;
      ELSIF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        NEW.verdict_run_id := NEW.run_id;
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER deployment_run_qa_verdict_run BEFORE INSERT OR UPDATE OF status ON deployment_run_qa
      FOR EACH ROW EXECUTE FUNCTION deployment_run_qa_verdict_run();

    -- An execution's end belongs to the run that owned the execution when it ended.
    CREATE FUNCTION qa_plan_execution_verdict_run() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF NEW.status <> 'running' AND OLD.status = 'running' THEN
        NEW.verdict_run_id := NEW.run_id;
      END IF;
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER qa_plan_execution_verdict_run BEFORE UPDATE OF status ON qa_plan_executions
      FOR EACH ROW EXECUTE FUNCTION qa_plan_execution_verdict_run();

    -- A case's verdict belongs to the run owning its execution at commit: verdict writers lock
    -- the execution row first, so this read sees the owner a racing takeover left.
    CREATE FUNCTION qa_plan_execution_result_verdict_run() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      NEW.verdict_run_id := coalesce(NEW.verdict_run_id,
        (SELECT e.run_id FROM qa_plan_executions e WHERE e.execution_id = NEW.execution_id));
      RETURN NEW;
    END $fn$;
    CREATE TRIGGER qa_plan_execution_result_verdict_run BEFORE INSERT ON qa_plan_execution_results
      FOR EACH ROW EXECUTE FUNCTION qa_plan_execution_result_verdict_run();

    UPDATE deployment_run_qa SET verdict_run_id = run_id WHERE status <> 'pending';
    UPDATE qa_plan_executions SET verdict_run_id = run_id WHERE status <> 'running';
    UPDATE qa_plan_execution_results r SET verdict_run_id = e.run_id
      FROM qa_plan_executions e WHERE e.execution_id = r.execution_id;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    DROP TRIGGER qa_plan_execution_result_verdict_run ON qa_plan_execution_results;
    DROP TRIGGER qa_plan_execution_verdict_run ON qa_plan_executions;
    DROP TRIGGER deployment_run_qa_verdict_run ON deployment_run_qa;
    DROP FUNCTION qa_plan_execution_result_verdict_run(), qa_plan_execution_verdict_run(), deployment_run_qa_verdict_run();
    ALTER TABLE qa_plan_execution_results DROP COLUMN verdict_run_id;
    ALTER TABLE qa_plan_executions DROP COLUMN verdict_run_id;
    ALTER TABLE deployment_run_qa DROP COLUMN verdict_run_id;
    DROP INDEX deployment_runs_one_successor;
    ALTER TABLE projects DROP COLUMN repository;
  `.execute(db);
}
