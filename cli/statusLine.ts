import { existsSync, fstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { billableTokens, type UsageTotals } from '../domain/usage/buckets';
import { DEFAULT_DATABASE_URL, yokeHome } from '../config/paths';
import { clearPending, readPending, recordPending, type PendingAttestation } from './pendingAttestation';
import { databaseRole, readableDatabaseUrl } from '../config/databaseUrl';
import { MAX_CONTEXT_WINDOW } from '../domain/contextWindow';
import { wireQuery, WireError, WireUnsupported } from './wireQuery';
import { endQuietlyWhenOutputCloses } from './closedOutput';

/**
 * `yoke hooks status-line` (U3): Claude runs it on every prompt with its status-line JSON on
 * stdin. It attests the served model and `context_window.context_window_size` for the
 * session and prints one line. It is loaded without commander, kysely, Temporal or even `pg`
 * (bin/yoke routes here first; the statement goes over wireQuery.ts), so it costs little more
 * than starting node.
 */
interface StatusInput {
  session_id?: string;
  model?: { id?: string; display_name?: string };
  context_window?: { context_window_size?: number; total_input_tokens?: number; total_output_tokens?: number } | null;
}

/**
 * The payload, read at once: a pipe, socket or file on fd 0 needs no stream machinery; a
 * terminal gives none. A descriptor left non-blocking (EAGAIN) is read as a stream instead.
 */
async function readStdin(): Promise<string> {
  try {
    const st = fstatSync(0);
    return st.isFIFO() || st.isFile() || st.isSocket() ? readFileSync(0, 'utf8') : '';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') return '';
  }
  return new Promise((resolve) => {
    let text = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (d) => (text += d));
    process.stdin.on('end', () => resolve(text));
  });
}

function compact(n: number): string {
  return n >= 1_000_000
    ? `${(n / 1_000_000).toFixed(n % 1_000_000 ? 1 : 0)}M`
    : n >= 1000
      ? `${Math.round(n / 1000)}k`
      : String(n);
}

/**
 * DATABASE_URL (made readable as the rest of the CLI reads it, so libpq's empty host reaches the
 * wire client too), else what `npm start` recorded, else the default; without loading zod.
 */
function databaseUrl(): string {
  const given = process.env.DATABASE_URL;
  if (given) return readableDatabaseUrl(given) ?? given;
  const file = join(yokeHome(), 'services.json');
  try {
    if (existsSync(file))
      return (JSON.parse(readFileSync(file, 'utf8')) as { databaseUrl?: string }).databaseUrl ?? DEFAULT_DATABASE_URL;
  } catch {
    // fall through to the default
  }
  return DEFAULT_DATABASE_URL;
}

/** The prompt waits for yoke at most this long in all (connect, attest, read), then shows stdin's figures. */
const WAIT_MS = 1500;

// Served facts come only from the provider's own statement, never from a request (U2, U3).
const ATTEST_AND_READ = `WITH attest AS (
   UPDATE sessions SET served_model = coalesce($2, served_model), served_window = coalesce($3, served_window),
          served_effort = coalesce($4, served_effort), served_attested_at = now()
    WHERE session_id = $1 AND ($2::text IS NOT NULL OR $3::int IS NOT NULL OR $4::text IS NOT NULL)
   RETURNING session_id)
 SELECT (SELECT totals FROM session_usage WHERE session_id = $1 AND status <> 'unavailable') AS totals,
        EXISTS (SELECT 1 FROM attest) OR EXISTS (SELECT 1 FROM sessions WHERE session_id = $1) AS known`;

/** One round trip: the wire client, or `pg` for what it does not speak (TLS, SCRAM, options). */
async function attestAndRead(
  url: string,
  params: (string | number | null)[],
): Promise<{ totals: UsageTotals | null; known: boolean }> {
  try {
    const rows = await wireQuery(url, ATTEST_AND_READ, params, WAIT_MS);
    return { totals: rows[0]?.[0] ? (JSON.parse(rows[0][0]) as UsageTotals) : null, known: rows[0]?.[1] === 't' };
  } catch (err) {
    if (!(err instanceof WireUnsupported)) throw err;
  }
  const { Client } = await import('pg');
  const client = new Client({ connectionString: url, connectionTimeoutMillis: WAIT_MS, query_timeout: WAIT_MS });
  try {
    await client.connect();
    const { rows } = await client.query<{ totals: UsageTotals | null; known: boolean }>(ATTEST_AND_READ, params);
    return { totals: rows[0]?.totals ?? null, known: rows[0]?.known === true };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Attests the served facts (with any this session left pending, U4) and reads the measured
 * totals, in one statement. A failed or slow write is recorded for the next hook, not swallowed.
 */
async function attest(
  sessionId: string,
  current: { model: string | null; window: number | null },
): Promise<{ tokens: number | null; pending?: PendingAttestation; refused?: boolean; unknown?: boolean }> {
  const url = databaseUrl();
  const role = databaseRole(url);
  const before = readPending(sessionId, role);
  // the current statement is the newest: its facts win, the pending ones fill the gaps
  // (an effort comes only from a served-model hook that could not reach Postgres)
  const facts = {
    model: current.model ?? before?.model ?? null,
    window: current.window ?? before?.window ?? null,
    effort: before?.effort ?? null,
  };
  try {
    const { totals, known } = await attestAndRead(url, [sessionId, facts.model, facts.window, facts.effort]);
    if (before) clearPending(sessionId);
    const tokens = totals ? Object.values(totals).reduce((sum, m) => sum + billableTokens(m.all), 0) : null;
    // a session yoke does not know (never registered, or not this actor's to read) stores nothing: said, not hidden
    return { tokens, unknown: !known };
  } catch (err) {
    // U4: only a failed-open write retries. One Postgres refused (another actor's session, a
    // value it does not take) would be refused again: nothing is kept, and what was kept goes too.
    if (refusedByPostgres(err)) {
      if (before) clearPending(sessionId);
      return { tokens: null, refused: true };
    }
    // The prompt must not wait on yoke: show what stdin said, and keep the facts for the next hook.
    if (facts.model === null && facts.window === null && facts.effort === null) return { tokens: null };
    return { tokens: null, pending: recordPending(sessionId, role, facts, (err as Error).message) };
  }
}

/**
 * SQLSTATEs of an answer that would be the same next time: yoke's own refusals (YK, e.g. another
 * actor's session), access rules (42), values the columns do not take (22) and integrity (23).
 * Any other failure (Postgres away, slow, shutting down, failing) is retried by the next hook.
 */
const REFUSALS = /^(YK|42|22|23)/;

/** An answer from Postgres itself refusing the statement, not a failure to reach it or run it. */
function refusedByPostgres(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  // the wire client's server errors, and pg's (which carry the server's severity)
  const fromServer = err instanceof WireError || (err instanceof Error && 'severity' in err);
  return fromServer && typeof code === 'string' && REFUSALS.test(code);
}

export async function statusLine(): Promise<number> {
  // U3 U4: a harness that stops reading before the line is written (the attestation is already
  // stored by then) ends the hook quietly, exit 0, not with an EPIPE stack trace.
  endQuietlyWhenOutputCloses();
  let input: StatusInput = {};
  try {
    const parsed: unknown = JSON.parse((await readStdin()) || '{}');
    // a statement is an object; anything else (null, a list, a string) states nothing
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) input = parsed as StatusInput;
  } catch {
    process.stdout.write('yoke: unreadable status-line input\n');
    return 0; // a status line never breaks the prompt
  }
  const sessionId =
    (typeof input.session_id === 'string' && input.session_id.trim() ? input.session_id : undefined) ??
    process.env.YOKE_SESSION_ID;
  // U2: only a well-formed statement attests; a window that is not a positive integer (or a
  // model id that is not a name) is shown as sent but never stored as a served fact.
  const sent = input.context_window?.context_window_size;
  const window = Number.isInteger(sent) && sent! > 0 && sent! <= MAX_CONTEXT_WINDOW ? sent : undefined;
  const model = typeof input.model?.id === 'string' && input.model.id.trim() ? input.model.id : undefined;
  const { tokens, pending, refused, unknown } = sessionId
    ? await attest(sessionId, { model: model ?? null, window: window ?? null })
    : { tokens: null, pending: undefined, refused: false, unknown: false };
  const parts = [(typeof input.model?.display_name === 'string' && input.model.display_name) || model || 'model ?'];
  if (window) parts.push(`${compact(window)} ctx`);
  const count = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0); // a string is no count
  const shown =
    tokens ??
    (count(input.context_window?.total_input_tokens) + count(input.context_window?.total_output_tokens) || null);
  if (shown !== null) parts.push(`${compact(shown)} tokens`);
  if (pending) parts.push('served facts pending');
  if (refused) parts.push('served facts refused');
  if (unknown) parts.push(`session ${sessionId} not registered`);
  process.stdout.write(`${parts.join(' · ')}\n`);
  return 0;
}
