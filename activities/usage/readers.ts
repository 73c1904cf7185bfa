import { readdirSync, statSync, type Stats } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { addCall, modelUsage, type Buckets, type UsageTotals } from '../../domain/usage/buckets';
import type { Checkpoint, CodexFileMark, FileMark } from '../../domain/usage/checkpoint';
import { assertRegularArtifacts } from './artifactFile';
import { CallDigests } from './callDigests';
import { readClaudeRow, type ClaudeRowFields, type ClaudeUsageCounts } from './claudeRow';
import { readBudget, scanLines, type ReadBudget } from './lineStream';
import type { FoldedHarness } from '../../domain/harnesses';

/**
 * Usage readers (U5, U6, U9-U11): each folds only the bytes after its per-file watermark
 * into a checkpoint of accumulators (never the artifact), and derives absolute totals from
 * it, so a fold repeated on the same bytes cannot inflate anything. A file unchanged since
 * its mark (same inode, size and modification time) costs one stat and is not opened.
 */
export const READER_VERSION = 4; // 4: a count that is not a non-negative integer within 2^53-1 is never counted (U9 U10)
export const MAX_LINE_BYTES = 8 * 1024 * 1024;
const USAGE_KEY = Buffer.from('"usage"');

export type { Checkpoint, FileMark };

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

/** A token count that is not one: its row (statement) is not counted at all. */
const INVALID = -1;

/**
 * U9 U10: a token count is a non-negative integer within 2^53-1. An absent (or null) field is
 * 0: unavailable for that surface. Anything else (a negative, a fraction, a string, a value
 * past 2^53-1, which JSON.parse has already rounded) is INVALID: the statement holding it is
 * unreadable, never read as 0 or as a huge number.
 */
function tokenCount(v: unknown): number {
  if (v === undefined || v === null) return 0;
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v + 0 : INVALID;
}

/** A JSON object (not an array), or undefined. */
function objectOf(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

function note(cp: Checkpoint, reason: string): void {
  if (!cp.reasons.includes(reason)) cp.reasons.push(reason);
}

type InvalidRows = NonNullable<Checkpoint['invalid_counts']>;

function invalidRows(cp: Checkpoint): InvalidRows {
  return (cp.invalid_counts ??= {});
}

/** U9 U10: a relevant row (statement) with an invalid token count: none of its counts is added, and the reading says so. */
function noteInvalid(cp: Checkpoint, path: string, end: number): void {
  const entry = (invalidRows(cp)[path] ??= { rows: 0, end: 0 });
  entry.rows++;
  entry.end = Math.max(entry.end, end);
}

/** The rows a file read again from its start, or superseded by a later cumulative total, no longer lack. */
function forgetInvalid(cp: Checkpoint, path: string): void {
  const rows = cp.invalid_counts;
  if (rows) delete rows[path];
}

/** U9: one reason per file that held rows with invalid token counts: the reading is partial. */
function invalidReasons(cp: Checkpoint, kind: string): string[] {
  const rows = cp.invalid_counts ?? {};
  // in file order, whatever order the files were read again in
  return Object.entries(rows)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(
      ([path, { rows: count, end }]) =>
        `${count} ${kind}${count === 1 ? '' : 's'} in ${basename(path)} with invalid token counts (not a non-negative integer), not counted; the last ended at byte ${end}`,
    );
}

/** The file's stat, or undefined when it is gone or unchanged since its mark (same inode, size and mtime). */
function changedSinceMark(cp: Checkpoint, path: string): Stats | undefined {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (!stat) return undefined;
  const mark = cp.files[path];
  if (mark && mark.ino === stat.ino && mark.size === stat.size && mark.mtime_ms === stat.mtimeMs) return undefined;
  return stat;
}

/**
 * Where to resume a file, from one stat: undefined when there is nothing to read (the file is
 * gone, or unchanged since its mark: same inode, size and modification time). A file that
 * shrank, or another file under the same path (a rotation), is re-read from the start and
 * marked partial.
 */
function resumeAt(cp: Checkpoint, path: string): { from: number; stat: Stats } | undefined {
  const stat = changedSinceMark(cp, path);
  if (!stat) return undefined;
  const mark = cp.files[path];
  if (!mark) return { from: 0, stat };
  if (stat.size < mark.offset || (mark.ino !== undefined && mark.ino !== stat.ino)) {
    note(cp, `${basename(path)} was truncated or rotated: re-read from the start, earlier history is gone`);
    mark.offset = 0;
    forgetInvalid(cp, path);
  }
  return { from: mark.offset, stat };
}

/**
 * A file's mark after a read up to `offset` of what `stat` saw (taken before the read, so a
 * write during it changes the size the next fold compares). A read cut short by the fold's
 * limits keeps no identity: the next fold must open the file and read on.
 */
function markAfter(stat: Stats, offset: number, budget: ReadBudget | undefined): FileMark {
  return budget?.stopped
    ? { offset, size: stat.size }
    : { offset, size: stat.size, ino: stat.ino, mtime_ms: stat.mtimeMs };
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

/**
 * The counts of a parsed Claude `message.usage` (absent or null counts are 0; so are the counts
 * of a cache_creation or output_tokens_details that is no object); undefined when the usage is
 * no object or holds an invalid count (U9 U10): then none of its counts is read.
 */
function claudeCounts(value: unknown): ClaudeUsageCounts | undefined {
  const usage = objectOf(value);
  if (!usage) return undefined;
  // read through `?.`, not `?? {}`: a row without output_tokens_details allocated an object per row
  const creation = usage.cache_creation as Record<string, unknown> | null | undefined;
  const details = usage.output_tokens_details as Record<string, unknown> | null | undefined;
  const counts = {
    input: tokenCount(usage.input_tokens),
    cacheRead: tokenCount(usage.cache_read_input_tokens),
    cacheCreation: tokenCount(usage.cache_creation_input_tokens),
    write5m: tokenCount(creation?.ephemeral_5m_input_tokens),
    write1h: tokenCount(creation?.ephemeral_1h_input_tokens),
    output: tokenCount(usage.output_tokens),
    thinking: tokenCount(details?.thinking_tokens),
  };
  return counts.input < 0 ||
    counts.cacheRead < 0 ||
    counts.cacheCreation < 0 ||
    counts.write5m < 0 ||
    counts.write1h < 0 ||
    counts.output < 0 ||
    counts.thinking < 0
    ? undefined
    : counts;
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

/** U5: Claude's message.usage in disjoint buckets; undefined when it is invalid (U9 U10). */
export function claudeBuckets(usage: Record<string, unknown>): Buckets | undefined {
  const counts = claudeCounts(usage);
  return counts && claudeCountBuckets(counts);
}

/** U6: `<transcript stem>/subagents/agent-*.jsonl` beside the main transcript. */
export function claudeArtifacts(main: string): string[] {
  const dir = join(dirname(main), basename(main, '.jsonl'), 'subagents');
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [main]; // no subagents folder
  }
  return [
    main,
    ...names
      .filter((f) => /^agent-.*\.jsonl$/.test(f))
      .sort()
      .map((f) => join(dir, f)),
  ];
}

interface ClaudeRow {
  type?: unknown;
  requestId?: unknown;
  message?: { id?: unknown; model?: unknown; usage?: Record<string, unknown> };
}

/**
 * A row parsed whole: the slow path for a row the byte reader (claudeRow.ts) does not cover,
 * and the way a thread reads rows before the byte reader is warm. An unparsable assistant row
 * is noted (U9) with the byte its row ends at (`end`, worked out only then); undefined means
 * nothing to count.
 */
function parsedClaudeRow(cp: Checkpoint, path: string, text: string, end: () => number): ClaudeRowFields | undefined {
  let parsed: ClaudeRow;
  try {
    parsed = JSON.parse(text) as ClaudeRow;
  } catch {
    if (text.includes('"assistant"'))
      note(cp, `an unreadable assistant row in ${basename(path)} ended at byte ${end()}`);
    return undefined;
  }
  const message = parsed?.message;
  const key = message?.id ?? (typeof parsed?.requestId === 'string' ? parsed.requestId : undefined);
  const usage = message?.usage ? claudeCounts(message.usage) : undefined;
  return {
    assistant: parsed?.type === 'assistant',
    key: key === undefined || key === null ? undefined : String(key),
    model: message?.model === undefined || message.model === null ? undefined : String(message.model),
    usage,
    invalid: !!message?.usage && !usage,
  };
}

/**
 * The byte reader (claudeRow.ts) beats JSON.parse only once V8 has optimized it, which takes
 * thousands of rows; before that it is several times slower. So a thread parses rows natively
 * until it has read this much transcript (a hook's small incremental fold, a fresh process,
 * never pays the warm-up), and a file with this much unread goes to the byte reader at once.
 */
const BYTE_READER_AFTER_BYTES = 16 << 20;
let claudeBytesRead = 0;
let inBulk = false;

/**
 * Tells this thread it is about to fold at least `bytes` of transcript (a backfill's share of a
 * corpus): past the warm-up size, its byte reader is used from the first row, as it will warm
 * up anyway. Parsing the first 16 MB natively costs a thread as much time and about 10 MB
 * more memory (the decoded blocks and parsed rows), which two threads pay at once.
 */
export function foldingInBulk(bytes: number): void {
  if (bytes >= byteReaderAfter()) inBulk = true;
}

/** YOKE_BYTE_READER_AFTER_BYTES moves the switch (0: the byte reader always), so tests can hold both readers to the same totals. */
function byteReaderAfter(): number {
  const set = Number(process.env.YOKE_BYTE_READER_AFTER_BYTES);
  return process.env.YOKE_BYTE_READER_AFTER_BYTES && set >= 0 ? set : BYTE_READER_AFTER_BYTES;
}

/** Streaming snapshots of one call are adjacent; a few open calls per file leave slack for interleaving. */
const OPEN_PER_FILE = 4;

/**
 * Totals count closed calls as they close and open ones once, at the end: a call's streaming
 * snapshots replace each other in `open` without touching the totals (the checkpoint's totals
 * include the open calls, as before). Closed ids are digested once, when the fold ends; ids
 * closed by earlier folds are looked up in their packed digests (callDigests.ts).
 */
export async function foldClaude(cp: Checkpoint, main: string, budget?: ReadBudget): Promise<Checkpoint> {
  const state = (cp.claude ??= { totals: {}, open: {} });
  const closedBefore = new CallDigests(state);
  const closedNow = new Set<string>();
  // a Map while the fold runs: the stored object, keyed by ids that come and go, cost a new
  // hidden class or a dictionary lookup per call in a cold process
  const open = new Map(Object.entries(state.open));
  for (const call of open.values()) addCall(state.totals, call.model, call.usage, -1);
  const openInFile = new Map<string, string[]>(); // insertion order: oldest first

  /**
   * One call's row: counted, or a snapshot that replaces the call's open one, or a copy of a
   * closed call. `end`: the byte the row ends at (or how to work it out), for a row that cannot be counted.
   */
  const count = (path: string, fields: ClaudeRowFields | undefined, end: number | (() => number)) => {
    // progress rows copy a subagent's message; user rows carry toolUseResult.usage: neither is a call of its own.
    if (!fields?.assistant || fields.model === '<synthetic>' || !fields.key) return;
    if (!fields.usage) {
      // U9 U10: a call's usage with an invalid count: none of it is added, the reading is partial
      if (fields.invalid) noteInvalid(cp, path, typeof end === 'number' ? end : end());
      return;
    }
    const key = fields.key;
    const known = open.get(key);
    if (!known && (closedNow.has(key) || closedBefore.has(key))) return; // a replay or copy of a call already counted in full
    // Streaming writes snapshots of one call whose output grows: the largest, last row counts.
    if (known && fields.usage.output < known.usage.output) return;
    open.set(key, { file: path, model: fields.model ?? 'unknown', usage: claudeCountBuckets(fields.usage) });
    if (known) return;
    let mine = openInFile.get(path);
    if (!mine) {
      mine = [];
      for (const [k, call] of open) if (call.file === path && k !== key) mine.push(k);
      openInFile.set(path, mine);
    }
    mine.push(key);
    while (mine.length > OPEN_PER_FILE) {
      const old = mine.shift()!;
      const call = open.get(old)!;
      addCall(state.totals, call.model, call.usage);
      closedNow.add(old);
      open.delete(old);
    }
  };

  for (const path of claudeArtifacts(main)) {
    const resume = resumeAt(cp, path);
    if (!resume) continue;
    let offset = resume.from;
    const after = byteReaderAfter();
    const byteReader = inBulk || claudeBytesRead >= after || resume.stat.size - offset >= after;
    offset = await scanLines(
      path,
      offset,
      {
        maxLineBytes: MAX_LINE_BYTES,
        budget,
        onBlock: byteReader
          ? undefined
          : (bytes, end) => {
              countBlock(cp, path, bytes, end - bytes.length, count);
              offset = end;
            },
      },
      (row) => {
        offset = row.end;
        if (row.kind === 'oversized') {
          // Huge rows are file-history snapshots and the like; an oversized assistant row is a real gap.
          if (/"type"\s*:\s*"assistant"/.test(row.prefix))
            note(cp, `an assistant row of ${row.bytes} bytes in ${basename(path)} was too large to read`);
          return;
        }
        // Only rows that carry a usage block can matter; the rest are never decoded.
        if (row.bytes.indexOf(USAGE_KEY) < 0) return;
        const end = row.end;
        count(path, readClaudeRow(row.bytes) ?? parsedClaudeRow(cp, path, row.bytes.toString('utf8'), () => end), end);
      },
    );
    claudeBytesRead += offset - resume.from;
    cp.files[path] = markAfter(resume.stat, offset, budget);
  }
  for (const call of open.values()) addCall(state.totals, call.model, call.usage);
  state.open = Object.fromEntries(open);
  state.closed_digests = closedBefore.encode(closedNow);
  delete state.closed;
  return cp;
}

/**
 * Whole lines a buffer at a time, for a thread whose byte reader is still cold: the block is
 * decoded once and searched with the engine's own string search for rows that carry a usage
 * block, each parsed natively; the lines between them cost nothing. `from` is the file offset
 * the block starts at (for the byte an unreadable row ends at).
 */
function countBlock(
  cp: Checkpoint,
  path: string,
  bytes: Buffer,
  from: number,
  count: (path: string, fields: ClaudeRowFields | undefined, end: () => number) => void,
): void {
  if (bytes.indexOf(USAGE_KEY) < 0) return;
  const text = bytes.toString('utf8');
  let start = 0;
  for (;;) {
    const usage = text.indexOf('"usage"', start);
    if (usage < 0) return;
    // the line holding it: the lines before it are stepped over forwards (searching back from
    // the key, which sits near its row's end, took 1-2 µs a row in a cold process)
    let lineStart = start;
    let nl = text.indexOf('\n', lineStart); // every line of a block ends with one (lineStream cuts it so)
    while (nl >= 0 && nl < usage) {
      lineStart = nl + 1;
      nl = text.indexOf('\n', lineStart);
    }
    const lineEnd = nl < 0 ? text.length : nl; // a block without its last newline still ends
    const end = () => from + Buffer.byteLength(text.slice(0, lineEnd + 1));
    count(path, parsedClaudeRow(cp, path, text.slice(lineStart, lineEnd), end), end);
    start = lineEnd + 1;
  }
}

/** A copy of the running totals, made by hand: structuredClone took 18 µs a session, this takes 3. */
function claudeTotals(cp: Checkpoint): UsageTotals {
  const totals: UsageTotals = {};
  for (const [model, usage] of Object.entries(cp.claude?.totals ?? {})) {
    const entry = modelUsage(totals, model);
    Object.assign(entry.all, usage.all);
    Object.assign(entry.above_200k, usage.above_200k);
  }
  return totals;
}

// ---------------------------------------------------------------- Codex

/**
 * U5: Codex's cumulative token_count: input includes cached input, output includes reasoning.
 * undefined when it is no object or holds an invalid count (U9 U10): then none of it is read.
 */
export function codexBuckets(value: unknown): Buckets | undefined {
  const usage = objectOf(value);
  if (!usage) return undefined;
  const input = tokenCount(usage.input_tokens);
  const cached = tokenCount(usage.cached_input_tokens);
  const output = tokenCount(usage.output_tokens);
  const reasoning = tokenCount(usage.reasoning_output_tokens);
  if (input < 0 || cached < 0 || output < 0 || reasoning < 0) return undefined;
  return {
    input: Math.max(0, input - cached),
    cached_input: cached,
    cache_write: 0,
    cache_write_long: 0,
    output,
    reasoning,
  };
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

/** How many date folders (the parent's day and the days after it) a child-thread search reads (U6). */
export const CODEX_CHILD_DAY_FOLDERS = 14;

const DIGITS = (n: number) => new RegExp(`^\\d{${n}}$`);
const sortedDirs = (dir: string, width: number) => {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((d) => d.isDirectory() && DIGITS(width).test(d.name))
      .map((d) => d.name)
      .sort();
  } catch {
    return [];
  }
};

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

const SUB_AGENT = /sub_?agent/i;

/** U6: the thread ids a rollout row names when it is about a sub-agent (its own session_meta aside). */
function nameThreads(text: string, named: Set<string>): void {
  if (!SUB_AGENT.test(text) || text.includes('"session_meta"')) return;
  for (const id of text.match(UUID) ?? []) named.add(id.toLowerCase());
}

/**
 * U6: child-thread rollouts, found by the thread ids that sub-agent rows of a rollout named
 * (collected as its rows are read, kept in its mark until found), in the rollout's date folder
 * and the later ones (bounded); the search stops once every named thread is found.
 */
function codexChildren(path: string, mark: CodexFileMark, known: Set<string>): string[] {
  const ids = new Set(mark.named_threads);
  const found: string[] = [];
  for (const dir of childFolders(path)) {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const f of names) {
      if (!f.endsWith('.jsonl')) continue;
      const lower = f.toLowerCase();
      const id = [...ids].find((i) => lower.includes(i));
      if (!id) continue;
      ids.delete(id);
      const file = join(dir, f);
      if (file !== path && !known.has(file)) found.push(file);
    }
    if (ids.size === 0) break;
  }
  if (ids.size) mark.named_threads = [...ids];
  else delete mark.named_threads;
  return found;
}

export async function foldCodex(cp: Checkpoint, main: string, budget?: ReadBudget): Promise<Checkpoint> {
  const limits = { maxLineBytes: MAX_LINE_BYTES, budget };
  cp.threads ??= {};
  const queue = [main, ...Object.keys(cp.files).filter((f) => f !== main)];
  for (let i = 0; i < queue.length; i++) {
    const path = queue[i]!;
    const resume = resumeAt(cp, path);
    if (resume) {
      const mark = (cp.files[path] ??= { offset: 0, size: 0 });
      const named = new Set(mark.named_threads);
      let offset = resume.from;
      offset = await scanLines(path, offset, limits, (row) => {
        offset = row.end;
        if (row.kind === 'oversized') {
          nameThreads(row.prefix, named);
          return;
        }
        const text = row.bytes.toString('utf8');
        nameThreads(text, named);
        foldCodexRow(cp, path, mark, text, row.end);
      });
      // The thread's own fields stay; the file's identity is the new mark's alone (a read cut
      // short by the budget keeps none, so the next fold reads on whatever the stat says).
      const { ino: _ino, mtime_ms: _mtime, ...threadFields } = mark;
      cp.files[path] = {
        ...threadFields,
        ...markAfter(resume.stat, offset, budget),
        ...(named.size ? { named_threads: [...named] } : {}),
      };
    }
    const mark = cp.files[path];
    if (mark?.named_threads) for (const child of codexChildren(path, mark, new Set(queue))) queue.push(child);
  }
  return cp;
}

/** One rollout row: the thread it belongs to, its models, served facts and cumulative total. */
function foldCodexRow(cp: Checkpoint, path: string, mark: CodexFileMark, text: string, end: number): void {
  const threads = cp.threads!;
  let parsed: { timestamp?: string; type?: string; payload?: Record<string, unknown> };
  try {
    parsed = JSON.parse(text);
  } catch {
    if (text.includes('token_count'))
      note(cp, `an unreadable token_count row in ${basename(path)} ended at byte ${end}`);
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
    const info = payload.info as { total_token_usage?: unknown } | null;
    if (info?.total_token_usage) {
      const usage = codexBuckets(info.total_token_usage);
      // U9 U10: an invalid total is not read: the thread keeps its last readable one, and the
      // reading is partial until a later cumulative total in this rollout supersedes it
      if (!usage) noteInvalid(cp, path, end);
      else {
        thread.usage = usage; // cumulative: the last total is the thread's
        forgetInvalid(cp, path);
      }
    }
  }
}

function codexTotals(cp: Checkpoint): { totals: UsageTotals; caveat: string | null } {
  const totals: UsageTotals = {};
  const mixed: string[] = [];
  for (const [id, thread] of Object.entries(cp.threads ?? {})) {
    if (!thread.usage) continue;
    const model = thread.models[thread.models.length - 1] ?? 'unknown';
    if (thread.models.length > 1) mixed.push(id);
    // A thread total is not one request: it is never tiered as long-context.
    const entry = modelUsage(totals, model);
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

/** Cursor's token fields as buckets; undefined when one is invalid (U9 U10): then none of them is read. */
function cursorBuckets(
  input: unknown,
  cachedInput: unknown,
  cacheWrite: unknown,
  output: unknown,
): Buckets | undefined {
  const usage = {
    input: tokenCount(input),
    cached_input: tokenCount(cachedInput),
    cache_write: tokenCount(cacheWrite),
    cache_write_long: 0,
    output: tokenCount(output),
    reasoning: 0,
  };
  return usage.input < 0 || usage.cached_input < 0 || usage.cache_write < 0 || usage.output < 0 ? undefined : usage;
}

/**
 * U6/U11: Cursor's settled print-mode result (the one JSON line `--output-format json`
 * prints; a half-written capture is not read) deduplicated by request_id, and hook payloads'
 * optional stop token fields, child turns included, deduplicated by generation_id. A capture
 * unchanged since its mark is not opened; a changed one is streamed line by line from its
 * start; the result may lack its final newline, so the text after the last one is taken once
 * it parses whole.
 */
export async function foldCursor(cp: Checkpoint, artifacts: string[], budget?: ReadBudget): Promise<Checkpoint> {
  const seen = (cp.seen ??= {});
  for (const path of artifacts) {
    // Every Cursor record is deduplicated (request_id, generation_id) and a capture is small: a
    // capture that changed at all (appended to, or rewritten in place by a resumed print-mode
    // run) is read again from its start, so a rewrite is never read from its middle.
    const stat = changedSinceMark(cp, path);
    if (!stat) continue;
    if (!stat.isFile()) assertRegularArtifacts([path]);
    forgetInvalid(cp, path); // read again from its start: its invalid records are counted afresh
    if (stat.size > MAX_LINE_BYTES) {
      note(
        cp,
        `${basename(path)} is larger than ${MAX_LINE_BYTES} bytes: not a Cursor result or hook capture, not read`,
      );
      continue;
    }
    let folded = 0;
    let unreadable = 0;
    /** A record that parses whole is folded (`end`: the byte it ends at); an unreadable line is passed over. */
    const record = (bytes: Buffer, end: number): boolean => {
      let value: unknown;
      try {
        value = JSON.parse(bytes.toString('utf8'));
      } catch {
        return false;
      }
      if (typeof value !== 'object' || value === null) return false;
      foldCursorRecord(cp, seen, path, value as Record<string, unknown>, end);
      return true;
    };
    let tailEnd = 0;
    const complete = await scanLines(
      path,
      0,
      {
        maxLineBytes: MAX_LINE_BYTES,
        budget,
        // a result written without its newline is read once it parses whole; until then it is still being written
        onTail: (bytes, end) => {
          if (record(bytes, end)) tailEnd = end;
        },
      },
      (row) => {
        if (row.kind !== 'line') return;
        if (record(row.bytes, row.end)) folded++;
        else unreadable++;
      },
    );
    if (tailEnd) folded++;
    if (folded === 0 && unreadable > 0) {
      // No line is a record: a pretty-printed result spans lines. Read it as one document (the
      // file is at most MAX_LINE_BYTES); until it parses whole it is still being written, and
      // its mark stays as it was, so the next fold reads it again.
      const whole = await readFile(path);
      if (record(whole, whole.length)) cp.files[path] = markAfter(stat, stat.size, budget);
      continue;
    }
    cp.files[path] = markAfter(stat, Math.max(complete, tailEnd), budget);
  }
  return cp;
}

function foldCursorRecord(
  cp: Checkpoint,
  seen: NonNullable<Checkpoint['seen']>,
  path: string,
  record: Record<string, unknown>,
  end: number,
) {
  if (record.type === 'result') {
    const key = `request:${String(record.request_id || basename(path))}`;
    if (record.usage === undefined || record.usage === null) {
      note(cp, 'a print-mode result without usage (an older Cursor build): that surface is unavailable');
      return;
    }
    const fields = objectOf(record.usage);
    const usage =
      fields && cursorBuckets(fields.inputTokens, fields.cacheReadTokens, fields.cacheWriteTokens, fields.outputTokens);
    // U9 U10: a usage that is no object, or holds an invalid count, is not read
    if (!usage) noteInvalid(cp, path, end);
    else seen[key] ??= { model: String(record.model ?? 'cursor-agent'), usage };
    return;
  }
  if (record.hook_event_name !== 'stop' || typeof record.generation_id !== 'string') return;
  const usage = cursorBuckets(
    record.input_tokens,
    record.cache_read_tokens,
    record.cache_write_tokens,
    record.output_tokens,
  );
  if (!usage) {
    noteInvalid(cp, path, end); // U9 U10: one invalid token field: none of the turn's is read
    return;
  }
  if (usage.input + usage.output + usage.cached_input + usage.cache_write === 0) return; // token fields are optional
  seen[`generation:${record.generation_id}`] ??= {
    model: typeof record.model === 'string' ? record.model : 'cursor-agent',
    usage,
  };
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
      ? Object.keys(cp.claude?.open ?? {}).length > 0 || !!cp.claude?.closed_digests
      : harness === 'codex'
        ? Object.values(cp.threads ?? {}).some((t) => t.usage)
        : Object.keys(cp.seen ?? {}).length > 0;
  // Not kept in the checkpoint: the next fold reads on from the watermark and is whole again.
  const stopped = budget.stopped ? [`${budget.stopped}: the totals stop there, the next fold reads on`] : [];
  return {
    totals,
    measured,
    reasons: [
      ...cp.reasons,
      ...invalidReasons(
        cp,
        harness === 'claude' ? 'assistant row' : harness === 'codex' ? 'token_count row' : 'record',
      ),
      ...stopped,
      ...(harness === 'codex' ? unfoundChildren(cp) : []),
    ],
    cost_caveat: caveat,
    checkpoint: cp,
  };
}

/**
 * U6 U10: a child thread a sub-agent row named whose rollout was not found (not written yet,
 * deleted, or past the date folders searched) is usage the totals lack: the reading is partial
 * until a later fold finds it, never a whole one with the child silently left out.
 */
function unfoundChildren(cp: Checkpoint): string[] {
  // a child's replay of its parent's history names its siblings again: a thread folded from any
  // file is found, whichever file's search missed it
  const known = new Set(Object.keys(cp.threads ?? {}).map((id) => id.toLowerCase()));
  const ids = [...new Set(Object.values(cp.files).flatMap((m) => (m as CodexFileMark).named_threads ?? []))].filter(
    (id) => !known.has(id),
  );
  if (ids.length === 0) return [];
  return [
    `child thread${ids.length === 1 ? '' : 's'} ${ids.join(', ')} named by a sub-agent row but no rollout found in the ${CODEX_CHILD_DAY_FOLDERS} date folders searched: not counted until a fold finds it`,
  ];
}
