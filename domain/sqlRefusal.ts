import { refusal, type YokeError } from './errors';

/**
 * Issue 13: authority is enforced in Postgres, so a "no" can come back as an error of the
 * database. `yoke_refuse` raises SQLSTATE YK001 with the spec's code in DETAIL and the
 * recovery in HINT; a privilege or row-level-security violation (42501) is permission_denied.
 * `yoke_refuse_with` adds the refusal's details as JSON on the HINT's last line (`details: {...}`).
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
    const { recovery, details } = splitHint(typeof hint === 'string' ? hint : 'ask an admin');
    return refusal(detail, text, { recovery, details });
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

const DETAILS_LINE = '\ndetails: ';

function splitHint(hint: string): { recovery: string; details: Record<string, unknown> } {
  const at = hint.lastIndexOf(DETAILS_LINE);
  if (at < 0) return { recovery: hint, details: {} };
  try {
    const details: unknown = JSON.parse(hint.slice(at + DETAILS_LINE.length));
    if (typeof details === 'object' && details !== null && !Array.isArray(details))
      return { recovery: hint.slice(0, at), details: details as Record<string, unknown> };
  } catch {
    // not ours: the hint stays whole
  }
  return { recovery: hint, details: {} };
}
