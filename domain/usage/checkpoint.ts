import type { Buckets, UsageTotals } from './buckets';

/**
 * U9/U10: what a fold keeps between folds of one session (session_usage.checkpoint): per file a
 * watermark, and per harness the accumulators its totals are derived from, never the artifact.
 */
export interface FileMark {
  /** The end of the last whole line read: the next fold reads on from here. */
  offset: number;
  /** The file's size when it was last read (before the read, so nothing written after it is skipped). */
  size: number;
  /**
   * The file's identity (inode) and modification time when it was last read: a file whose
   * identity, size and time are unchanged is not opened again; another inode under the same
   * path is a rotation, re-read from the start. Absent in checkpoints written before these
   * were kept, and after a fold stopped by its limits (the next fold must read on).
   */
  ino?: number;
  mtime_ms?: number;
}

/** Codex: what a rollout told about its thread, and the child threads it named (U6). */
export interface CodexFileMark {
  thread?: string;
  child?: boolean;
  child_start?: string;
  /** Thread ids its sub-agent rows named whose rollouts are not found yet: looked for on each fold. */
  named_threads?: string[];
}

export interface Checkpoint {
  reader_version: number;
  files: Record<string, FileMark & CodexFileMark>;
  /**
   * Claude: running per-model totals, the calls still open (the last few per file: their
   * streaming snapshots may still grow, so their counted usage is kept to be replaced), and
   * a compact digest of every closed call id, so a replay or copy of it is never counted
   * again. Memory follows the number of calls, never the size of the files.
   */
  claude?: {
    totals: UsageTotals;
    open: Record<string, { file: string; model: string; usage: Buckets }>;
    /** The closed calls' 64-bit digests, sorted, packed 8 bytes each, base64 (callDigests.ts). */
    closed_digests?: string;
    /** Before reader version 3's packing: the same digests as base-36 `hi:lo` strings (read, never written). */
    closed?: string[];
  };
  /** Codex: each thread's own cumulative total and the models it was served by. */
  threads?: Record<string, { usage: Buckets | null; models: string[] }>;
  /** Cursor: print-mode request ids and hook generation ids already counted. */
  seen?: Record<string, { model: string; usage: Buckets }>;
  /**
   * U9 U10: per file, the relevant rows whose token counts were invalid (none of their counts
   * added) and the byte the last one ended at; each file with any makes the reading partial.
   */
  invalid_counts?: Record<string, { rows: number; end: number }>;
  /** Codex (U2, U3): the newest served model, effort and context window the main rollout stated. */
  served?: { model: string | null; window: number | null; effort?: string | null };
  /** U8: files whose model history (turn_context) could not be read: pricing is uncertain. */
  unreadable_model_history?: string[];
  reasons: string[];
}
