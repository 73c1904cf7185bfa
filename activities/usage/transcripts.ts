import { closeSync, existsSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, join } from 'node:path';
import type { BackfillHarness } from '../../domain/harnesses';

/**
 * Finding a harness's transcripts on disk, for a backfill: each found session is one main
 * artifact (its children are folded with it, never registered on their own), its own session
 * id, when it started and when it was last written.
 */
export type { BackfillHarness };

export interface FoundTranscript {
  sessionId: string;
  path: string;
  /** The first row's timestamp, else the file's modification time: what prices the session (U12). */
  startedAt: Date;
  /** The file's modification time: a backfilled session is history, ended when it was last written. */
  lastWrittenAt: Date;
  bytes: number;
}

/** Claude: CLAUDE_CONFIG_DIR, else ~/.claude and ~/.config/claude; Codex: CODEX_HOME, else ~/.codex. */
export function defaultTranscriptDirs(harness: BackfillHarness): string[] {
  if (harness === 'claude') {
    const configured = process.env.CLAUDE_CONFIG_DIR;
    const roots = configured
      ? configured
          .split(',')
          .map((d) => d.trim())
          .filter(Boolean)
      : [join(homedir(), '.claude'), join(homedir(), '.config', 'claude')];
    return roots.map((r) => join(r, 'projects'));
  }
  return [join(process.env.CODEX_HOME || join(homedir(), '.codex'), 'sessions')];
}

/** A file's first row (up to 4 MiB: Codex's session_meta carries its instructions), or less if longer. */
function head(path: string): string {
  const fd = openSync(path, 'r');
  try {
    let buf = Buffer.allocUnsafe(64 * 1024);
    let got = 0;
    for (;;) {
      const n = readSync(fd, buf, got, buf.length - got, got);
      got += n;
      if (n === 0 || buf.subarray(0, got).includes(0x0a) || got >= 4 << 20) return buf.toString('utf8', 0, got);
      if (got === buf.length) {
        const grown = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(grown, 0, 0, got);
        buf = grown;
      }
    }
  } finally {
    closeSync(fd);
  }
}

function firstTimestamp(text: string): Date | undefined {
  const m = /"timestamp"\s*:\s*"([^"]+)"/.exec(text);
  const t = m ? new Date(m[1]!) : undefined;
  return t && !Number.isNaN(t.getTime()) ? t : undefined;
}

function* jsonlFiles(dir: string, skipDir: (name: string) => boolean): Generator<string> {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return; // unreadable or gone: nothing here to backfill
  }
  for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!skipDir(entry.name)) yield* jsonlFiles(path, skipDir);
    } else if (entry.isFile() && entry.name.endsWith('.jsonl')) yield path;
  }
}

/**
 * Claude: every `<project>/<session>.jsonl`; the `<session>/subagents/` folders beside them
 * hold children, folded with their main transcript (U6). Codex: every rollout whose first
 * `session_meta` is not a sub-agent's (child threads are found and summed by their parent's fold).
 */
export function findTranscripts(harness: BackfillHarness, dirs: string[]): FoundTranscript[] {
  const found = new Map<string, FoundTranscript>();
  for (const dir of dirs) {
    if (!existsSync(dir)) continue;
    for (const path of jsonlFiles(dir, (name) => harness === 'claude' && name === 'subagents')) {
      const stat = statSync(path);
      const text = head(path);
      let sessionId = basename(path, '.jsonl');
      if (harness === 'codex') {
        const meta = codexMeta(text);
        if (meta?.child) continue;
        if (meta?.id) sessionId = meta.id;
      }
      if (found.has(sessionId)) continue; // the same session reachable twice (two config dirs)
      found.set(sessionId, {
        sessionId,
        path,
        startedAt: firstTimestamp(text) ?? stat.mtime,
        lastWrittenAt: stat.mtime,
        bytes: stat.size,
      });
    }
  }
  return [...found.values()];
}

function codexMeta(text: string): { id?: string; child: boolean } | undefined {
  const line = text.slice(0, text.indexOf('\n') < 0 ? text.length : text.indexOf('\n'));
  try {
    const row = JSON.parse(line) as { type?: string; payload?: { id?: unknown; source?: unknown } };
    if (row.type !== 'session_meta') return undefined;
    const source = row.payload?.source;
    return {
      id: typeof row.payload?.id === 'string' ? row.payload.id : undefined,
      child: typeof source === 'object' && source !== null && 'subagent' in source,
    };
  } catch {
    return undefined; // a first row longer than the head, or not JSON: take the file name
  }
}
