import { ApplicationFailure } from '@temporalio/common';
import { YokeError } from '../domain/errors';

type AsyncFns = Record<string, (...args: never[]) => Promise<unknown>>;

/**
 * DESIGN.md principle 4: a refusal raised inside an activity becomes a non-retryable
 * ApplicationFailure whose `type` is the specification's code, so retries never repeat a
 * "no" and callers read the code verbatim. Anything else stays retryable.
 */
export function raisingApplicationFailures<T extends AsyncFns>(activities: T): T {
  const wrapped: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(activities)) {
    wrapped[name] = async (...args: never[]) => {
      try {
        return await fn(...args);
      } catch (err) {
        if (err instanceof YokeError) {
          throw ApplicationFailure.create({
            message: err.message,
            type: err.code,
            nonRetryable: true,
            details: [{ recovery: err.recovery, details: err.details, kind: err.kind }],
          });
        }
        throw err;
      }
    };
  }
  return wrapped as T;
}
