import { sql, type Kysely } from 'kysely';

/**
 * Review fixes: a back-dated pricing revision carries the operator's reason (U12), and the
 * served effort is a provider-attested fact beside the served model and window (U2).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE pricing_revisions ADD COLUMN backdate_reason text;
    ALTER TABLE sessions ADD COLUMN served_effort text;
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE sessions DROP COLUMN served_effort;
    ALTER TABLE pricing_revisions DROP COLUMN backdate_reason;
  `.execute(db);
}
