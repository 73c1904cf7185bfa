import { Kysely, sql } from 'kysely';

/**
 * Issue 13: SSH credentials belong to the worker. Test machines and deploy hosts name a key in
 * the worker's own key directory (YOKE_SSH_KEY_DIR) by its file name; no path is stored, so no
 * user can make the worker open a file of its choosing. A stored identity file becomes the
 * credential named after its file name (its characters outside the credential alphabet
 * replaced), and the worker refuses credential_unknown until an operator places that key in
 * its key directory.
 */
export async function up(db: Kysely<any>): Promise<void> {
  for (const table of ['test_machines', 'deploy_hosts']) {
    await sql`
      ALTER TABLE ${sql.table(table)} ADD COLUMN credential text;
      UPDATE ${sql.table(table)} SET credential = left(CASE WHEN b ~ '^[A-Za-z0-9]' THEN b ELSE 'key' || b END, 100)
        FROM (SELECT ctid AS c, regexp_replace(regexp_replace(identity_file, '^.*/', ''), '[^A-Za-z0-9._-]', '_', 'g') AS b
                FROM ${sql.table(table)}) old
       WHERE ${sql.table(table)}.ctid = old.c;
      ALTER TABLE ${sql.table(table)} ALTER COLUMN credential SET NOT NULL,
        ADD CONSTRAINT ${sql.raw(`${table}_credential_is_a_name`)} CHECK (credential ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'),
        DROP COLUMN identity_file;
    `.execute(db);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['test_machines', 'deploy_hosts']) {
    await sql`
      ALTER TABLE ${sql.table(table)} ADD COLUMN identity_file text;
      UPDATE ${sql.table(table)} SET identity_file = credential;
      ALTER TABLE ${sql.table(table)} ALTER COLUMN identity_file SET NOT NULL, DROP COLUMN credential;
    `.execute(db);
  }
}
