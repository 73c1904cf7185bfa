import { ApplicationFailure, TemporalFailure } from '@temporalio/common';
import { YokeError } from '../domain/errors';
import { refusalFromPostgres } from '../domain/sqlRefusal';

type AsyncFns = Record<string, (...args: never[]) => Promise<unknown>>;

/** Connection-level codes: Postgres (class 08, shutdown, too many clients, lock or statement timeout) and sockets. */
const INFRASTRUCTURE_CODES = new Set([
  '57P01',
  '57P02',
  '57P03',
  '53300',
  '40001',
  '40P01',
  '55P03',
  '57014',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);
const INFRASTRUCTURE_MESSAGES = [
  /Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /connection error and is not queryable/i,
  /Client was closed and is not queryable/i,
  /the database system is (starting up|shutting down)/i,
];

/**
 * An error of the services around an activity (Postgres unreachable, a dropped connection, a
 * serialization conflict), not of the activity: retrying later is the answer.
 */
export function isInfrastructureFailure(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const { code, message, errors } = e as { code?: unknown; message?: unknown; errors?: unknown[] };
    if (typeof code === 'string' && (INFRASTRUCTURE_CODES.has(code) || code.startsWith('08'))) return true;
    if (typeof message === 'string' && INFRASTRUCTURE_MESSAGES.some((m) => m.test(message))) return true;
    // AggregateError (a dual-stack connect) carries the socket errors inside.
    if (Array.isArray(errors) && errors.some((x) => isInfrastructureFailure(x))) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * DESIGN.md principle 4: a refusal raised inside an activity becomes a non-retryable
 * ApplicationFailure whose `type` is the specification's code, so retries never repeat a
 * "no" and callers read the code verbatim. Anything else stays retryable, unless
 * `bugsAreFinal`: then only infrastructure failures are retried, and any other error (a bug, a
 * row that is not there) ends the attempt as `internal_error` for the workflow to record.
 */
export function raisingApplicationFailures<T extends AsyncFns>(
  activities: T,
  opts: { bugsAreFinal?: boolean } = {},
): T {
  const wrapped: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(activities)) {
    wrapped[name] = async (...args: never[]) => {
      try {
        return await fn(...args);
      } catch (caught) {
        // Issue 13: a refusal Postgres raised (row-level security, yoke_refuse) is final too.
        const err = refusalFromPostgres(caught) ?? caught;
        if (err instanceof YokeError) {
          throw ApplicationFailure.create({
            message: err.message,
            type: err.code,
            nonRetryable: true,
            details: [{ recovery: err.recovery, details: err.details, kind: err.kind }],
          });
        }
        if (opts.bugsAreFinal && !(err instanceof TemporalFailure) && !isInfrastructureFailure(err)) {
          throw ApplicationFailure.create({
            message: `${name}: ${(err as Error)?.message ?? String(err)}`,
            type: 'internal_error',
            nonRetryable: true,
            cause: err instanceof Error ? err : undefined,
          });
        }
        throw err;
      }
    };
  }
  return wrapped as T;
}
