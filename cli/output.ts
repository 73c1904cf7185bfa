import { EXIT_CODES, YokeError, unreachable, usageError } from '../domain/errors';
import { refusalFromPostgres } from '../domain/sqlRefusal';

export { endQuietlyWhenOutputCloses } from './closedOutput';

/** Prints a result: JSON on stdout with --json, else the human rendering. */
export function emit(json: boolean, data: unknown, human: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${human()}\n`);
}

export function warn(json: boolean, line: string): void {
  if (!json) process.stderr.write(`${line}\n`);
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'EHOSTUNREACH', 'ECONNRESET', 'EAI_AGAIN']);
// Postgres SQLSTATEs meaning "this database is not there for you right now": the connection
// exception class (08), a server shutting down, crashed or starting (57P0x), too many
// connections (53300: a refusal that passes when others disconnect). A missing database and a login
// refused (28000, 28P01) is its own answer: no wait or restart fixes the name or password.
// Not 08P01 (protocol violation): Postgres answers a malformed statement with it (a bind with the
// wrong parameter count), a bug in yoke that no wait rides out.
const UNAVAILABLE_SQLSTATES = new Set([
  '53300',
  '57P01',
  '57P02',
  '57P03',
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '08007',
]);
const LOGIN_REFUSED_SQLSTATES = new Set(['28000', '28P01']);

function networkCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { code?: unknown; errors?: unknown[]; message?: unknown };
  if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return e.code;
  if (Array.isArray(e.errors)) return e.errors.map(networkCode).find((c) => c !== undefined);
  // pg's own words for a connection that never came, or was lost mid-command (a statement after
  // the server went away inside a transaction meets a client that "is not queryable").
  if (
    typeof e.message === 'string' &&
    /timeout exceeded when trying to connect|Connection terminated|connection error and is not queryable/i.test(
      e.message,
    )
  )
    return 'ETIMEDOUT';
  return undefined;
}

/** Turns whatever went wrong into the one YokeError shape the CLI prints. */
export function asYokeError(err: unknown, databaseUrl?: string): YokeError {
  if (err instanceof YokeError) return err;
  const denied = refusalFromPostgres(err);
  if (denied) return denied;
  const where = databaseUrl ? redact(databaseUrl) : 'the configured database';
  const code = (err as { code?: unknown })?.code;
  if (code === '3D000') {
    // The server answered; the database is not there: no wait or restart makes it.
    return unreachable('database_missing', `Postgres at ${where} has no such database (${(err as Error).message})`, {
      recovery:
        'create and migrate it (`npm start` does both for the default `yoke` database; for another name: createdb NAME, then `yoke db migrate`), or point DATABASE_URL at an existing yoke database',
      details: { database: where },
    });
  }
  if (networkCode(err) || (typeof code === 'string' && UNAVAILABLE_SQLSTATES.has(code))) {
    return unreachable(
      'postgres_unreachable',
      `cannot reach Postgres at ${where}: ${(err as Error).message || networkCode(err)}`,
      {
        // A write cut off mid-way either committed whole or left nothing; the user must not guess.
        recovery:
          'start the local stack with `npm start`, or point DATABASE_URL at a reachable Postgres 14+; a transaction cut off mid-way either committed whole or wrote nothing: once Postgres answers, look (get/list) or run the command again',
        details: { database: where },
      },
    );
  }
  if (typeof code === 'string' && LOGIN_REFUSED_SQLSTATES.has(code)) {
    const role = (() => {
      try {
        return databaseUrl ? decodeURIComponent(new URL(databaseUrl).username) || null : null;
      } catch {
        return null;
      }
    })();
    return unreachable(
      'postgres_login_refused',
      `Postgres at ${where} refused the login${role ? ` as ${role}` : ''}: ${(err as Error).message}`,
      {
        recovery:
          'check the user and password in DATABASE_URL: an actor logs in with the connection string `yoke actors add` printed for it, and a removed actor can no longer log in (an admin adds it again: yoke actors add NAME)',
        details: { database: where, ...(role ? { role } : {}) },
      },
    );
  }
  // A missing table, or a missing yoke function (a database migrated by an older yoke, or never).
  if (
    code === '42P01' ||
    (code === '42883' && /function (\w+\.)?(yoke_|test_machine_|work_claims_)/.test(String((err as Error).message)))
  ) {
    return unreachable('database_not_migrated', `Postgres at ${where} has no yoke schema (${(err as Error).message})`, {
      recovery: 'run `yoke db migrate` (or `npm start`, which migrates)',
      details: { database: where },
    });
  }
  if (err && typeof err === 'object' && 'issues' in err && Array.isArray((err as { issues: unknown }).issues)) {
    const issue = (err as { issues: { path: PropertyKey[]; message: string }[] }).issues[0];
    return usageError('invalid_argument', `${issue?.path.join('.') || 'input'}: ${issue?.message ?? 'invalid'}`, {
      recovery: 'see --help',
    });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new YokeError(
    'refusal',
    'internal_error',
    message,
    'this is a bug in yoke; re-run with YOKE_DEBUG=1 and report the stack trace',
    {},
  );
}

export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable DATABASE_URL)';
  }
}

/** Prints the error on stderr and returns the documented exit status. */
export function report(err: YokeError, json: boolean): number {
  if (json) {
    process.stderr.write(`${JSON.stringify({ error: err.toJSON() })}\n`);
  } else {
    process.stderr.write(`${err.code}: ${err.message}\nrecovery: ${err.recovery}\n`);
  }
  return EXIT_CODES[err.kind];
}

/** A plain table: one header row, columns padded to their widest cell. */
/** U12: a table whose rows' costs carry caveats, each said under it (`caveat KEY: ...`). */
export function withCaveats(text: string, rows: { key: string; caveat: string | null }[]): string {
  return [text, ...rows.filter((r) => r.caveat).map((r) => `caveat ${r.key}: ${r.caveat}`)].join('\n');
}

export function table(headers: string[], rows: (string | number | null | undefined)[][]): string {
  if (rows.length === 0) return '(none)';
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
