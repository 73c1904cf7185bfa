/**
 * A database URL as every part of yoke reads it (`new URL`: role URLs, database names, the
 * status line's client, redaction), or undefined when it is no postgres:// URL.
 *
 * libpq and node-postgres take an empty host, `postgres://u@/db?host=/run/postgresql` (the
 * socket directory as a parameter), which the WHATWG parser refuses. Its host is filled in:
 * `localhost` when a `host` parameter names the server (both clients read the parameter
 * first), else what an empty host means to node-postgres, PGHOST or localhost. The server
 * reached is the same; the URL only becomes readable.
 */
export function readableDatabaseUrl(raw: string): string | undefined {
  if (isPostgresUrl(raw)) return raw;
  const emptyHost = /^(postgres(?:ql)?:\/\/[^/?#@]*)@\//i.exec(raw);
  if (!emptyHost) return undefined;
  const rest = raw.slice(emptyHost[0].length - 1);
  const hostParameter = /[?&]host=/.test(rest);
  const host = hostParameter ? 'localhost' : encodeURIComponent(process.env.PGHOST || 'localhost');
  const filled = `${emptyHost[1]}@${host}${rest}`;
  return isPostgresUrl(filled) ? filled : undefined;
}

/**
 * The role a database URL connects as, as both of yoke's clients read it: the URL's user, else
 * PGUSER, else the login user, else `postgres`. Facts kept for a retry are kept under it, so
 * another role's hook never writes them (issue 13).
 */
export function databaseRole(url: string): string {
  let user = '';
  try {
    user = decodeURIComponent(new URL(url).username);
  } catch {
    // an unreadable URL names no user: the environment's
  }
  return user || process.env.PGUSER || process.env.USER || 'postgres';
}

/** The forms a refusal names. */
export const DATABASE_URL_FORMS =
  'postgres://user:password@host:5432/yoke, or for a Unix socket postgres://user@/yoke?host=/run/postgresql';

function isPostgresUrl(text: string): boolean {
  try {
    const { protocol } = new URL(text);
    return protocol === 'postgres:' || protocol === 'postgresql:';
  } catch {
    return false;
  }
}
