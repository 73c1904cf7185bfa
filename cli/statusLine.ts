import { Client } from 'pg';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { billableTokens, type UsageTotals } from '../domain/usage/buckets';
import { DEFAULT_DATABASE_URL, yokeHome } from '../config/paths';
import { clearPending, readPending, recordPending, type PendingAttestation } from './pendingAttestation';

/**
 * `yoke hooks status-line` (U3): Claude runs it on every prompt with its status-line JSON on
 * stdin. It attests the served model and `context_window.context_window_size` for the
 * session and prints one line. It is loaded without commander, kysely or Temporal (bin/yoke
 * routes here first), so it costs little more than starting node.
 */
interface StatusInput {
  session_id?: string;
  model?: { id?: string; display_name?: string };
  context_window?: { context_window_size?: number; total_input_tokens?: number; total_output_tokens?: number } | null;
}

function readStdin(): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    if (process.stdin.isTTY) return resolve('');
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

/** DATABASE_URL, else what `npm start` recorded, else the default; without loading zod. */
function databaseUrl(): string {
  if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
  const file = join(yokeHome(), 'services.json');
  try {
    if (existsSync(file))
      return (JSON.parse(readFileSync(file, 'utf8')) as { databaseUrl?: string }).databaseUrl ?? DEFAULT_DATABASE_URL;
  } catch {
    // fall through to the default
  }
  return DEFAULT_DATABASE_URL;
}

/**
 * Attests the served facts (with any this session left pending, U4) and reads the measured
 * totals, in one statement. A failed write is recorded for the next hook, not swallowed.
 */
async function attest(
  sessionId: string,
  current: { model: string | null; window: number | null },
): Promise<{ tokens: number | null; pending?: PendingAttestation }> {
  const before = readPending(sessionId);
  // the current statement is the newest: its facts win, the pending ones fill the gaps
  const facts = { model: current.model ?? before?.model ?? null, window: current.window ?? before?.window ?? null };
  // bounded: a slow database costs the prompt at most the connect plus one statement's wait
  const client = new Client({ connectionString: databaseUrl(), connectionTimeoutMillis: 1500, query_timeout: 1500 });
  try {
    await client.connect();
    // Served facts come only from the provider's own statement, never from a request (U2, U3).
    const { rows } = await client.query<{ totals: UsageTotals }>(
      `WITH attest AS (
         UPDATE sessions SET served_model = coalesce($2, served_model), served_window = coalesce($3, served_window), served_attested_at = now()
          WHERE session_id = $1 AND ($2::text IS NOT NULL OR $3::int IS NOT NULL)
         RETURNING session_id)
       SELECT totals FROM session_usage WHERE session_id = $1 AND status <> 'unavailable'`,
      [sessionId, facts.model, facts.window],
    );
    if (before) clearPending(sessionId);
    const tokens = rows[0] ? Object.values(rows[0].totals).reduce((sum, m) => sum + billableTokens(m.all), 0) : null;
    return { tokens };
  } catch (err) {
    // The prompt must not wait on yoke: show what stdin said, and keep the facts for the next hook.
    if (facts.model === null && facts.window === null) return { tokens: null };
    return { tokens: null, pending: recordPending(sessionId, facts, (err as Error).message) };
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function statusLine(): Promise<number> {
  let input: StatusInput = {};
  try {
    input = JSON.parse((await readStdin()) || '{}');
  } catch {
    process.stdout.write('yoke: unreadable status-line input\n');
    return 0; // a status line never breaks the prompt
  }
  const sessionId = input.session_id ?? process.env.YOKE_SESSION_ID;
  const window = input.context_window?.context_window_size;
  const model = input.model?.id;
  let tokens: number | null = null;
  let pending: PendingAttestation | undefined;
  if (sessionId) {
    const facts = { model: model ?? null, window: Number.isInteger(window) ? window! : null };
    const result = await attest(sessionId, facts);
    tokens = result.tokens;
    pending = result.pending;
  }
  const parts = [input.model?.display_name ?? model ?? 'model ?'];
  if (window) parts.push(`${compact(window)} ctx`);
  const shown =
    tokens ??
    ((input.context_window?.total_input_tokens ?? 0) + (input.context_window?.total_output_tokens ?? 0) || null);
  if (shown !== null) parts.push(`${compact(shown)} tokens`);
  if (pending) parts.push('served facts pending');
  process.stdout.write(`${parts.join(' · ')}\n`);
  return 0;
}
