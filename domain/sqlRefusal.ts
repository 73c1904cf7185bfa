import { refusal, type YokeError } from './errors';

/**
 * Issue 13: authority is enforced in Postgres, so a "no" can come back as an error of the
 * database. `yoke_refuse` raises SQLSTATE YK001 with the spec's code in DETAIL and the
 * recovery in HINT; a privilege or row-level-security violation (42501) is permission_denied.
 * Pure: it reads only the error's fields.
 */
export function refusalFromPostgres(err: unknown): YokeError | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { code, detail, hint, message, table } = err as {
    code?: unknown;
    detail?: unknown;
    hint?: unknown;
    message?: unknown;
    table?: unknown;
  };
  const text = typeof message === 'string' ? message : String(err);
  if (code === 'YK001' && typeof detail === 'string') {
    return refusal(detail, text, { recovery: typeof hint === 'string' ? hint : 'ask an admin' });
  }
  if (code === '42501') {
    return refusal('permission_denied', text, {
      recovery:
        'your Postgres role may not do this: ask an admin (see README, Multi-user deployment), or connect as an actor that may',
      details: typeof table === 'string' ? { table } : {},
    });
  }
  return undefined;
}
