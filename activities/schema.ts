/** `yoke db migrate` runs in the CLI's process: the migrations are the repository's, applied as they are. */
export { migrateToLatest as applyMigrations } from '../db/migrate';
