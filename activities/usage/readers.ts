import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { addCall, zeroBuckets, type Buckets, type UsageTotals } from '../../domain/usage/buckets';
import { assertRegularArtifacts } from './artifactFile';
import { readClaudeRow, type ClaudeRowFields, type ClaudeUsageCounts } from './claudeRow';
import { readBudget, scanLines, type ReadBudget } from './lineStream';
import type { FoldedHarness } from '../../domain/harnesses';

/**
 * Usage readers (U5, U6, U9-U11): each folds only the bytes after its per-file watermark
 * into a checkpoint of accumulators (never the artifact), and derives absolute totals from
 * it, so a fold repeated on the same bytes cannot inflate anything.
 */
export const READER_VERSION = 3;
export const MAX_LINE_BYTES = 8 * 1024 * 1024;
const USAGE_KEY = Buffer.from('"usage"');

export interface FileMark {
  offset: number;
  size: number;
}

export interface Checkpoint {
  reader_version: number;
  files: Record<string, FileMark & { thread?: string; child?: boolean; child_start?: string }>;
  /**
   * Claude: running per-model totals, the calls still open (the last few per file: their
   * streaming snapshots may still grow, so their counted usage is kept to be replaced), and
   * a compact digest of every closed call id, so a replay or copy of it is never counted
   * again. Memory follows the number of calls, never the size of the files.
   */
  claude?: {
    totals: UsageTotals;
    open: Record<string, { file: string; model: string; usage: Buckets }>;
    closed: string[];
  };
  /** Codex: each thread's own cumulative total and the models it was served by. */
  threads?: Record<string, { usage: Buckets | null; models: string[] }>;
  /** Cursor: print-mode request ids and hook generation ids already counted. */
  seen?: Record<string, { model: string; usage: Buckets }>;
  /** Codex (U2, U3): the newest served model, effort and context window the main rollout stated. */
  served?: { model: string | null; window: number | null; effort?: string | null };
  /** U8: files whose model history (turn_context) could not be read: pricing is uncertain. */
  unreadable_model_history?: string[];
  reasons: string[];
}

export interface Reading {
  totals: UsageTotals;
  /** Some usage source was found (a reading that found none is `unavailable`). */
  measured: boolean;
  reasons: string[];
  cost_caveat: string | null;
  checkpoint: Checkpoint;
}

export function emptyCheckpoint(): Checkpoint {
  return { reader_version: READER_VERSION, files: {}, reasons: [] };
}

const n = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

function note(cp: Checkpoint, reason: string): void {
  if (!cp.reasons.includes(reason)) cp.reasons.push(reason);
}

/** Where to resume a file: its watermark, or the start (marked partial) if it shrank or was replaced. */
function resumeAt(cp: Checkpoint, path: string): number {
  const size = statSync(path).size;
  const mark = cp.files[path];
  if (!mark) return 0;
  if (size < mark.offset) {
    note(cp, `${basename(path)} was truncated or rotated: re-read from the start, earlier history is gone`);
    mark.offset = 0;
  }
  return mark.offset;
}

/** Bytes a fold would read (past each known file's watermark): what sizes a backfill's pool. */
export function unreadBytes(main: string, previous: Checkpoint | undefined): number {
  const files = new Set([main, ...Object.keys(previous?.files ?? {})]);
  let total = 0;
  for (const path of files) {
    try {
      total += Math.max(0, statSync(path).size - (previous?.files[path]?.offset ?? 0));
    } catch {
      // gone: nothing to read
    }
  }
  return total;
}

// ---------------------------------------------------------------- Claude

/** The counts of a parsed Claude `message.usage` (absent or malformed counts are 0). */
function claudeCounts(usage: Record<string, unknown>): ClaudeUsageCounts {
  const creation = (usage.cache_creation ?? {}) as Record<string, unknown>;
  const details = (usage.output_tokens_details ?? {}) as Record<string, unknown>;
  return {
    input: n(usage.input_tokens),
    cacheRead: n(usage.cache_read_input_tokens),
    cacheCreation: n(usage.cache_creation_input_tokens),
    write5m: n(creation.ephemeral_5m_input_tokens),
    write1h: n(creation.ephemeral_1h_input_tokens),
    output: n(usage.output_tokens),
    thinking: n(details.thinking_tokens),
  };
}

/** U5: Claude's usage counts in disjoint buckets (cache writes split by lifetime; thinking inside output). */
function claudeCountBuckets(c: ClaudeUsageCounts): Buckets {
  return {
    input: c.input,
    cached_input: c.cacheRead,
    cache_write: c.write5m + Math.max(0, c.cacheCreation - c.write5m - c.write1h),
    cache_write_long: c.write1h,
    output: c.output,
    reasoning: c.thinking,
  };
}

/** U5: Claude's message.usage in disjoint buckets. */
export function claudeBuckets(usage: Record<string, unknown>): Buckets {
  return claudeCountBuckets(claudeCounts(usage));
}

/** U6: `<transcript stem>/subagents/agent-*.jsonl` beside the main transcript. */
export function claudeArtifacts(main: string): string[] {
  const dir = join(dirname(main), basename(main, '.jsonl'), 'subagents');
  const subagents = existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => /^agent-.*\.jsonl$/.test(f))
        .sort()
        .map((f) => join(dir, f))
    : [];
  return [main, ...subagents];
}

interface ClaudeRow {
  type?: unknown;
  requestId?: unknown;
  message?: { id?: unknown; model?: unknown; usage?: Record<string, unknown> };
}

/**
 * The slow path for a row the byte reader (claudeRow.ts) does not cover: the whole row parsed.
 * An unparsable assistant row is noted (U9); undefined means nothing to count.
 */
function parsedClaudeRow(cp: Checkpoint, path: string, bytes: Buffer, end: number): ClaudeRowFields | undefined {
  const text = bytes.toString('utf8');
  let parsed: ClaudeRow;
  try {
    parsed = JSON.parse(text) as ClaudeRow;
  } catch {
    if (text.includes('"assistant"')) note(cp, `an unreadable assistant row in ${basename(path)} ended at byte ${end}`);
    return undefined;
  }
  const message = parsed.message;
  const key = message?.id ?? (typeof parsed.requestId === 'string' ? parsed.requestId : undefined);
  return {
    assistant: parsed.type === 'assistant',
    key: key === undefined || key === null ? undefined : String(key),
    model: message?.model === undefined || message.model === null ? undefined : String(message.model),
    usage: message?.usage ? claudeCounts(message.usage) : undefined,
  };
}

/** Streaming snapshots of one call are adjacent; a few open calls per file leave slack for interleaving. */
const OPEN_PER_FILE = 4;

/**
 * A closed call's id kept as 64 bits (two 32-bit FNV-1a lanes, each finished with murmur3's
 * mix): a session of a million calls collides with odds near 3e-8, and hashing in JS costs a
 * fraction of a crypto call (reader version 3; version 2 kept SHA-1 prefixes).
 */
function digest(id: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ id.length;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  const mix = (h: number) => {
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    return (h ^ (h >>> 16)) >>> 0;
  };
  return mix(a).toString(36) + ':' + mix(b).toString(36);
}

/**
 * Totals count closed calls as they close and open ones once, at the end: a call's streaming
 * snapshots replace each other in `open` without touching the totals (the checkpoint's totals
 * include the open calls, as before). Closed ids are digested once, when the fold ends; ids
 * closed by earlier folds are looked up by digest only while there are any.
 */
export async function foldClaude(cp: Checkpoint, main: string, budget?: ReadBudget): Promise<Checkpoint> {
  const limits = { maxLineBytes: MAX_LINE_BYTES, budget };
  const state = (cp.claude ??= { totals: {}, open: {}, closed: [] });
  const closedBefore = new Set(state.closed);
  const closedNow = new Set<string>();
  const isClosed = (key: string) => closedNow.has(key) || (closedBefore.size > 0 && closedBefore.has(digest(key)));
  for (const open of Object.values(state.open)) addCall(state.totals, open.model, open.usage, -1);
  const openInFile: Record<string, string[]> = {}; // insertion order: oldest first
  for (const path of claudeArtifacts(main)) {
    if (!existsSync(path)) continue;
    let offset = resumeAt(cp, path);
    offset = await scanLines(path, offset, limits, (row) => {
      offset = row.end;
      if (row.kind === 'oversized') {
        // Huge rows are file-history snapshots and the like; an oversized assistant row is a real gap.
        if (/"type"\s*:\s*"assistant"/.test(row.prefix))
          note(cp, `an assistant row of ${row.bytes} bytes in ${basename(path)} was too large to read`);
        return;
      }
      // Only rows that carry a usage block can matter; the rest are never decoded.
      if (row.bytes.indexOf(USAGE_KEY) < 0) return;
      const fields = readClaudeRow(row.bytes) ?? parsedClaudeRow(cp, path, row.bytes, row.end);
      // progress rows copy a subagent's message; user rows carry toolUseResult.usage: neither is a call of its own.
      if (!fields?.assistant || !fields.usage || fields.model === '<synthetic>' || !fields.key) return;
      const key = fields.key;
      const open = state.open[key];
      if (!open && isClosed(key)) return; // a replay or copy of a call already counted in full
      // Streaming writes snapshots of one call whose output grows: the largest, last row counts.
      if (open && fields.usage.output < open.usage.output) return;
      state.open[key] = { file: path, model: fields.model ?? 'unknown', usage: claudeCountBuckets(fields.usage) };
      if (!open) {
        const mine = (openInFile[path] ??= Object.keys(state.open).filter(
          (k) => state.open[k]!.file === path && k !== key,
        ));
        mine.push(key);
        while (mine.length > OPEN_PER_FILE) {
          const old = mine.shift()!;
          const call = state.open[old]!;
          addCall(state.totals, call.model, call.usage);
          closedNow.add(old);
          delete state.open[old];
        }
      }
    });
    cp.files[path] = { offset, size: statSync(path).size };
  }
  for (const open of Object.values(state.open)) addCall(state.totals, open.model, open.usage);
  for (const key of closedNow) closedBefore.add(digest(key));
  state.closed = [...closedBefore];
  return cp;
}

function claudeTotals(cp: Checkpoint): UsageTotals {
  return structuredClone(cp.claude?.totals ?? {});
}

// ---------------------------------------------------------------- Codex

/** U5: Codex's cumulative token_count: input includes cached input, output includes reasoning. */
export function codexBuckets(usage: Record<string, unknown>): Buckets {
  const cached = n(usage.cached_input_tokens);
  return {
    input: Math.max(0, n(usage.input_tokens) - cached),
    cached_input: cached,
    cache_write: 0,
    cache_write_long: 0,
    output: n(usage.output_tokens),
    reasoning: n(usage.reasoning_output_tokens),
  };
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

/** How many date folders (the parent's day and the days after it) a child-thread search reads (U6). */
export const CODEX_CHILD_DAY_FOLDERS = 14;

const DIGITS = (n: number) => new RegExp(`^\\d{${n}}$`);
const sortedDirs = (dir: string, width: number) =>
  existsSync(dir)
    ? readdirSync(dir, { withFileTypes: true })
        .filter((d) => d.isDirectory() && DIGITS(width).test(d.name))
        .map((d) => d.name)
        .sort()
    : [];

/**
 * The folders a child rollout may live in. Codex files rollouts under
 * `sessions/YYYY/MM/DD/` by the day each thread started, so a child spawned after midnight
 * lives in a later folder than its parent: the parent's day and the next date folders that
 * exist, bounded by CODEX_CHILD_DAY_FOLDERS. A rollout outside that layout searches its own folder.
 */
function childFolders(path: string): string[] {
  const day = dirname(path);
  const month = dirname(day);
  const year = dirname(month);
  if (!DIGITS(2).test(basename(day)) || !DIGITS(2).test(basename(month)) || !DIGITS(4).test(basename(year)))
    return [day];
  const root = dirname(year);
  const start = `${basename(year)}/${basename(month)}/${basename(day)}`;
  const out: string[] = [];
  for (const y of sortedDirs(root, 4).filter((y) => y >= basename(year)))
    for (const m of sortedDirs(join(root, y), 2))
      for (const d of sortedDirs(join(root, y, m), 2)) {
        if (`${y}/${m}/${d}` < start) continue;
        out.push(join(root, y, m, d));
        if (out.length >= CODEX_CHILD_DAY_FOLDERS) return out;
      }
  return out;
}

/**
 * U6: child-thread rollouts, found by the thread ids that sub-agent items in a rollout name,
 * in the parent's date folder and the later ones (bounded); the search stops once every named
 * thread is found.
 */
function codexChildren(path: string, known: Set<string>): string[] {
  const ids = new Set<string>();
  const text = readFileSync(path, 'utf8'); // rollouts are small JSON lines; children are found once per fold
  for (const line of text.split('\n')) {
    if (!/sub_?agent/i.test(line) || line.includes('"session_meta"')) continue;
    for (const id of line.match(UUID) ?? []) ids.add(id.toLowerCase());
  }
  const found: string[] = [];
  for (const dir of ids.size ? childFolders(path) : []) {
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.jsonl'))) {
      const id = [...ids].find((i) => f.toLowerCase().includes(i));
      if (!id) continue;
      ids.delete(id);
      const file = join(dir, f);
      if (file !== path && !known.has(file)) found.push(file);
    }
    if (ids.size === 0) break;
  }
  return found;
}

export async function foldCodex(cp: Checkpoint, main: string, budget?: ReadBudget): Promise<Checkpoint> {
  const limits = { maxLineBytes: MAX_LINE_BYTES, budget };
  const threads = (cp.threads ??= {});
  const queue = [main, ...Object.keys(cp.files).filter((f) => f !== main)];
  for (let i = 0; i < queue.length; i++) {
    const path = queue[i]!;
    if (!existsSync(path)) continue;
    const mark = (cp.files[path] ??= { offset: 0, size: 0 });
    let offset = resumeAt(cp, path);
    offset = await scanLines(path, offset, limits, (row) => {
      offset = row.end;
      if (row.kind === 'oversized') return;
      const text = row.bytes.toString('utf8');
      let parsed: { timestamp?: string; type?: string; payload?: Record<string, unknown> };
      try {
        parsed = JSON.parse(text);
      } catch {
        if (text.includes('token_count'))
          note(cp, `an unreadable token_count row in ${basename(path)} ended at byte ${row.end}`);
        // U8: a model statement we cannot read leaves the model behind these tokens uncertain
        if (text.includes('turn_context') && !(cp.unreadable_model_history ??= []).includes(basename(path)))
          cp.unreadable_model_history!.push(basename(path));
        return;
      }
      const payload = parsed.payload ?? {};
      if (parsed.type === 'session_meta') {
        // A child file starts with its own session_meta, then its parent's, then a replay of the parent's history.
        if (!mark.thread) {
          mark.thread = String(payload.id);
          mark.child = typeof payload.source === 'object' && payload.source !== null && 'subagent' in payload.source;
          mark.child_start = parsed.timestamp;
          threads[mark.thread] ??= { usage: null, models: [] };
        }
        return;
      }
      const replayed = mark.child && mark.child_start && parsed.timestamp && parsed.timestamp < mark.child_start;
      if (replayed || !mark.thread) return;
      const thread = threads[mark.thread]!;
      if (parsed.type === 'turn_context' && typeof payload.model === 'string' && !thread.models.includes(payload.model))
        thread.models.push(payload.model);
      if (!mark.child) {
        // U3/U10: only the newest statement attests; the fold reads to the end, so the last one wins.
        const served = (cp.served ??= { model: null, window: null });
        if (parsed.type === 'turn_context' && typeof payload.model === 'string') served.model = payload.model;
        if (parsed.type === 'turn_context' && typeof payload.effort === 'string') served.effort = payload.effort;
        const window =
          parsed.type === 'turn_context'
            ? payload.model_context_window
            : parsed.type === 'event_msg' && payload.type === 'task_started'
              ? payload.model_context_window
              : parsed.type === 'event_msg' && payload.type === 'token_count'
                ? (payload.info as { model_context_window?: unknown } | null)?.model_context_window
                : undefined;
        if (typeof window === 'number' && window > 0) served.window = window;
      }
      if (parsed.type === 'event_msg' && payload.type === 'token_count') {
        const info = payload.info as { total_token_usage?: Record<string, unknown> } | null;
        if (info?.total_token_usage) thread.usage = codexBuckets(info.total_token_usage); // cumulative: the last total is the thread's
      }
    });
    cp.files[path] = { ...mark, offset, size: statSync(path).size };
    for (const child of codexChildren(path, new Set(queue))) queue.push(child);
  }
  return cp;
}

function codexTotals(cp: Checkpoint): { totals: UsageTotals; caveat: string | null } {
  const totals: UsageTotals = {};
  const mixed: string[] = [];
  for (const [id, thread] of Object.entries(cp.threads ?? {})) {
    if (!thread.usage) continue;
    const model = thread.models[thread.models.length - 1] ?? 'unknown';
    if (thread.models.length > 1) mixed.push(id);
    // A thread total is not one request: it is never tiered as long-context.
    const entry = (totals[model] ??= { all: zeroBuckets(), above_200k: zeroBuckets() });
    for (const k of Object.keys(entry.all) as (keyof Buckets)[]) entry.all[k] += thread.usage[k];
  }
  const caveats = [
    mixed.length
      ? `several models served thread(s) ${mixed.join(', ')}; each thread-wide total is priced at its last model`
      : null,
    cp.unreadable_model_history?.length
      ? `unreadable model history in ${cp.unreadable_model_history.join(', ')}: the model behind some tokens is uncertain`
      : null,
  ].filter((c): c is string => c !== null);
  return { totals, caveat: caveats.length ? caveats.join('; ') : null };
}

// ---------------------------------------------------------------- Cursor

function cursorResultBuckets(usage: Record<string, unknown>): Buckets {
  return {
    input: n(usage.inputTokens),
    cached_input: n(usage.cacheReadTokens),
    cache_write: n(usage.cacheWriteTokens),
    cache_write_long: 0,
    output: n(usage.outputTokens),
    reasoning: 0,
  };
}

/**
 * U6/U11: Cursor's settled print-mode result (one JSON object; a half-written capture is
 * not read) deduplicated by request_id, and hook payloads' optional stop token fields,
 * child turns included, deduplicated by generation_id.
 */
export async function foldCursor(cp: Checkpoint, artifacts: string[], budget?: ReadBudget): Promise<Checkpoint> {
  const limits = { maxLineBytes: MAX_LINE_BYTES, budget };
  const seen = (cp.seen ??= {});
  for (const path of artifacts) {
    if (!existsSync(path)) continue;
    assertRegularArtifacts([path]);
    if (statSync(path).size > MAX_LINE_BYTES) {
      note(
        cp,
        `${basename(path)} is larger than ${MAX_LINE_BYTES} bytes: not a Cursor result or hook capture, not read`,
      );
      continue;
    }
    const text = readFileSync(path, 'utf8');
    let whole: Record<string, unknown> | undefined;
    try {
      whole = JSON.parse(text);
    } catch {
      whole = undefined;
    }
    if (whole && whole.type === 'result') {
      const key = `request:${String(whole.request_id || basename(path))}`;
      if (whole.usage && typeof whole.usage === 'object')
        seen[key] ??= {
          model: String(whole.model ?? 'cursor-agent'),
          usage: cursorResultBuckets(whole.usage as Record<string, unknown>),
        };
      else note(cp, 'a print-mode result without usage (an older Cursor build): that surface is unavailable');
      cp.files[path] = { offset: text.length, size: text.length };
      continue;
    }
    if (text.trimStart().startsWith('{') && !text.includes('\n{') && !whole) continue; // a capture still being written
    let offset = resumeAt(cp, path);
    offset = await scanLines(path, offset, limits, (row) => {
      offset = row.end;
      if (row.kind === 'oversized') return;
      let hook: Record<string, unknown>;
      try {
        hook = JSON.parse(row.bytes.toString('utf8'));
      } catch {
        return;
      }
      if (hook.hook_event_name !== 'stop' || typeof hook.generation_id !== 'string') return;
      const usage = {
        input: n(hook.input_tokens),
        cached_input: n(hook.cache_read_tokens),
        cache_write: n(hook.cache_write_tokens),
        cache_write_long: 0,
        output: n(hook.output_tokens),
        reasoning: 0,
      };
      if (usage.input + usage.output + usage.cached_input + usage.cache_write === 0) return; // token fields are optional
      seen[`generation:${hook.generation_id}`] ??= {
        model: typeof hook.model === 'string' ? hook.model : 'cursor-agent',
        usage,
      };
    });
    cp.files[path] = { offset, size: statSync(path).size };
  }
  return cp;
}

function cursorTotals(cp: Checkpoint): UsageTotals {
  const totals: UsageTotals = {};
  for (const entry of Object.values(cp.seen ?? {})) addCall(totals, entry.model, entry.usage);
  return totals;
}

// ---------------------------------------------------------------- one entry point

export type Harness = FoldedHarness;

/** One fold's bounds (YOKE_FOLD_MAX_BYTES, YOKE_FOLD_MAX_SECONDS): a bigger backlog takes several folds. */
export function foldLimits(): { maxBytes: number; maxMs: number } {
  const positive = (v: string | undefined, fallback: number) => (Number(v) > 0 ? Number(v) : fallback);
  return {
    maxBytes: positive(process.env.YOKE_FOLD_MAX_BYTES, 2 * 1024 ** 3),
    maxMs: positive(process.env.YOKE_FOLD_MAX_SECONDS, 300) * 1000,
  };
}

/**
 * `previous` is taken over: the fold advances it in place and returns it as the new checkpoint
 * (callers hand over a checkpoint they no longer read: a stored row just parsed, a message
 * from another thread). Copying it first cost an incremental fold more than its reading.
 */
export async function fold(harness: Harness, previous: Checkpoint | undefined, artifacts: string[]): Promise<Reading> {
  // U9: a new reader version re-folds once, from an empty checkpoint.
  const cp: Checkpoint = previous && previous.reader_version === READER_VERSION ? previous : emptyCheckpoint();
  const limits = foldLimits();
  const budget = readBudget(limits.maxBytes, limits.maxMs);
  if (harness === 'claude') await foldClaude(cp, artifacts[0]!, budget);
  else if (harness === 'codex') await foldCodex(cp, artifacts[0]!, budget);
  else await foldCursor(cp, artifacts, budget);
  const { totals, caveat } =
    harness === 'codex'
      ? codexTotals(cp)
      : { totals: harness === 'claude' ? claudeTotals(cp) : cursorTotals(cp), caveat: null };
  const measured =
    harness === 'claude'
      ? Object.keys(cp.claude?.open ?? {}).length + (cp.claude?.closed.length ?? 0) > 0
      : harness === 'codex'
        ? Object.values(cp.threads ?? {}).some((t) => t.usage)
        : Object.keys(cp.seen ?? {}).length > 0;
  // Not kept in the checkpoint: the next fold reads on from the watermark and is whole again.
  const stopped = budget.stopped ? [`${budget.stopped}: the totals stop there, the next fold reads on`] : [];
  return { totals, measured, reasons: [...cp.reasons, ...stopped], cost_caveat: caveat, checkpoint: cp };
}
