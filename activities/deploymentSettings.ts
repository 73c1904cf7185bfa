import { readDriverFreshSeconds, writeDriverFreshSeconds } from '../db/deploymentSettings';
import type { Executor } from '../db/pool';

/**
 * R1 (issue 4): a driver attachment's freshness is one setting of the deployment, in Postgres,
 * so the CLI and the database refusal agree. The worker records its YOKE_DRIVER_FRESH_SECONDS
 * there when it starts; the CLI honours what is recorded (`fallbackMs`, its own configuration,
 * only when the database has no such setting yet). A user cannot change it (admins and the
 * worker write it), so nobody shortens it to take another's run.
 */
export async function driverFreshMs(db: Executor, fallbackMs: number): Promise<number> {
  const seconds = await readDriverFreshSeconds(db);
  return seconds === undefined ? fallbackMs : seconds * 1000;
}

export async function recordDriverFreshMs(db: Executor, ms: number): Promise<void> {
  await writeDriverFreshSeconds(db, ms / 1000);
}
