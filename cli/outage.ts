import { asYokeError } from './output';

/** How long a waiting or following command rides out Postgres being away before it exits 3. */
export const OUTAGE_GRACE_MS = 60_000;
const RETRY_EVERY_MS = 1_000;

/**
 * Issue 10: a command that waits or follows (`coordination-claim acquire --wait`, `qa watch`,
 * `deployment-runs watch`) reads Postgres again and again for minutes. A short outage (a
 * restart, a failover, a moment of too many connections) must not end it: its place in line,
 * the run and the execution all go on in Postgres without it. So a read that finds Postgres
 * out of reach is tried again every second, for at most `graceMs` from the first failure;
 * anything else, or a longer outage, is the command's error as before (exit 3). `onOutage` is
 * told once per outage, to say why the command pauses.
 */
export async function readThroughOutage<T>(
  read: () => Promise<T>,
  onOutage: (message: string) => void,
  graceMs = OUTAGE_GRACE_MS,
): Promise<T> {
  let since: number | undefined;
  for (;;) {
    try {
      return await read();
    } catch (err) {
      const reported = asYokeError(err);
      if (reported.code !== 'postgres_unreachable') throw err;
      if (since === undefined) {
        since = Date.now();
        onOutage(
          `Postgres is out of reach (${reported.message}); trying again every second for up to ${Math.round(graceMs / 1000)} s`,
        );
      } else if (Date.now() - since >= graceMs) throw err;
      await new Promise((r) => setTimeout(r, RETRY_EVERY_MS));
    }
  }
}
