import { Kysely, sql } from 'kysely';
import { user } from './0043_claimperf_lean_claims';
import { guarded, ownOnly } from './0056_session_update_guard';

/**
 * Issue 13 (U12, U13): a user updates its own session (heartbeat, attestation, request, end),
 * but what the session is stays as registered. A user's raw UPDATE could move offered_at (and
 * so choose the pricing revision its usage is priced by), move a session to another project or
 * machine (who may read its usage, which machine card it counts on), relabel its harness or drop
 * its probe mark. Those are refused as the CLI refuses them (session_identity_conflict there);
 * filling in a project, machine or harness left out at registration stays allowed, as does
 * ending (an ended session was already closed to every change: session_ended). The WHEN keeps 0056's shape: the function runs
 * only to refuse.
 */
const identityChanged = `(OLD.offered_at <> NEW.offered_at
             OR (OLD.project_id IS NOT NULL AND NEW.project_id IS DISTINCT FROM OLD.project_id)
             OR (OLD.machine_id IS NOT NULL AND NEW.machine_id IS DISTINCT FROM OLD.machine_id)
             OR (OLD.harness <> 'other' AND NEW.harness <> OLD.harness)
             OR (OLD.probe AND NOT NEW.probe))`;

const kept = `(${user}
        AND (OLD.actor_id <> session_user OR NEW.session_id <> OLD.session_id OR NEW.actor_id <> OLD.actor_id
             OR NEW.registered_by <> OLD.registered_by
             OR ${identityChanged})
        AND NOT yoke_settlement_session_end(OLD, NEW))`;

const ownOnlyFunction = (identity: string) =>
  sql.raw(`
    CREATE OR REPLACE FUNCTION sessions_own_only() RETURNS trigger LANGUAGE plpgsql SET search_path = public, pg_temp AS $fn$
    BEGIN
      IF yoke_is_service() THEN RETURN NEW; END IF;
      IF OLD.actor_id <> session_user THEN
        PERFORM yoke_refuse('permission_denied',
          format('session %s belongs to actor %s; %s cannot heartbeat, change or end it', OLD.session_id, OLD.actor_id, session_user),
          'act on your own sessions (yoke sessions list), or ask an admin');
      END IF;
      IF NEW.session_id <> OLD.session_id OR NEW.actor_id <> OLD.actor_id OR NEW.registered_by <> OLD.registered_by THEN
        PERFORM yoke_refuse('permission_denied', format('session %s keeps its id, actor and registrar', OLD.session_id),
          'register a new session instead');
      END IF;
      ${identity}
      RETURN NEW;
    END $fn$;`);

const identityRefusal = `IF ${identityChanged} THEN
        PERFORM yoke_refuse('permission_denied',
          format('session %s keeps what it was registered as: its start, project, machine, harness and probe mark', OLD.session_id),
          'register a new session for other facts');
      END IF;`;

export async function up(db: Kysely<any>): Promise<void> {
  await ownOnlyFunction(identityRefusal).execute(db);
  await ownOnly(kept).execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await ownOnly(guarded).execute(db);
  await ownOnlyFunction('').execute(db);
}
