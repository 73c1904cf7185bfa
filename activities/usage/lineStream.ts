import { closeSync, readSync } from 'node:fs';
import { openRegularFile } from './artifactFile';

/**
 * U9: readers stream an artifact line by line from a byte offset with fixed memory. A line
 * longer than `maxLineBytes` is never held whole: it is skipped and reported with its first
 * bytes, so the reader can tell whether it mattered. A final line without its newline is
 * still being written: it is left for the next fold, so the next offset never splits a row.
 * Lines come as bytes: a reader decodes only the lines that can matter to it. Resolves to the
 * offset after the last complete line (blank lines included): the file's next watermark.
 *
 * One buffer is reused for the whole file and lines are handed out as views into it (valid
 * only during the callback), so reading costs one copy from the page cache and no garbage.
 * Reads are synchronous (a thread-pool round trip per chunk costs more than the read on a
 * busy machine); the event loop gets a turn every few chunks so a long fold in an activity
 * worker does not starve its heartbeats.
 */
export type ScannedLine =
  { kind: 'line'; bytes: Buffer; end: number } | { kind: 'oversized'; prefix: string; bytes: number; end: number };

/**
 * What one fold may read: its bytes and its time are bounded, so no artifact (a huge file, a
 * slow disk) holds a worker slot for long. A scan that runs out stops after its last whole
 * line and says why in `stopped`; the watermark it returns lets the next fold go on from there.
 */
export interface ReadBudget {
  bytesLeft: number;
  deadline: number;
  stopped: string | null;
}

export function readBudget(maxBytes: number, maxMs: number): ReadBudget {
  return { bytesLeft: maxBytes, deadline: Date.now() + maxMs, stopped: null };
}

function exhausted(budget: ReadBudget | undefined, maxBytes: string): boolean {
  if (!budget) return false;
  if (budget.stopped) return true;
  if (budget.bytesLeft <= 0) budget.stopped = `this fold read its limit of ${maxBytes}`;
  else if (Date.now() > budget.deadline) budget.stopped = 'this fold ran out of its time limit';
  return budget.stopped !== null;
}

const CHUNK = 1 << 20;
const MIN_CHUNK = 16 << 10;
const PREFIX = 4096;
const CHUNKS_PER_TURN = 16;

/**
 * Full-size read buffers a finished scan hands to the next one on this thread. A fresh 1 MB
 * buffer per file, freed at its end, left the C allocator's heap growing over a corpus (about
 * 10 MB of peak memory a thread); concurrent scans on one thread each take their own.
 */
const spareChunks: Buffer[] = [];
const MAX_SPARE_CHUNKS = 2;

export async function scanLines(
  path: string,
  fromOffset: number,
  limits:
    | number
    | {
        maxLineBytes: number;
        budget?: ReadBudget;
        /** Shown what follows the last newline at the end of the file (a line still being written, or a document written without one). */
        onTail?: (bytes: Buffer, end: number) => void;
        /**
         * Shown whole lines a buffer at a time (with any blank ones, each under the bound), not
         * one by one: a reader that searches the block itself pays no call per line. Oversized
         * lines still come to `onLine`.
         */
        onBlock?: (bytes: Buffer, end: number) => void;
      },
  onLine: (line: ScannedLine) => void,
): Promise<number> {
  const { maxLineBytes, budget, onTail, onBlock } =
    typeof limits === 'number'
      ? { maxLineBytes: limits, budget: undefined, onTail: undefined, onBlock: undefined }
      : limits;
  const { fd, size } = openRegularFile(path);
  const limit = budget ? `${budget.bytesLeft} bytes` : '';
  // sized to what there is to read (an incremental fold reads a little of many files), grown on demand
  const unread = Math.max(0, size - fromOffset) + 1;
  const first = Math.min(CHUNK, maxLineBytes + 1, Math.max(MIN_CHUNK, unread));
  let buf = (first === CHUNK && spareChunks.pop()) || Buffer.allocUnsafe(first);
  try {
    let filled = 0; // bytes of buf holding data; buf[0] is the file's byte `base`
    let base = fromOffset;
    let complete = fromOffset; // the end of the last whole line
    let skipping: { prefix: string; bytes: number } | null = null;
    for (let reads = 1; ; reads++) {
      if (filled === buf.length) {
        // one line fills the buffer: grow it up to the bound (a bounded line is held whole)
        const grown = Buffer.allocUnsafe(Math.min(buf.length * 2, maxLineBytes + 1));
        buf.copy(grown, 0, 0, filled);
        buf = grown;
      }
      if (exhausted(budget, limit)) return complete; // the next fold goes on from the last whole line
      const got = readSync(fd, buf, filled, buf.length - filled, base + filled);
      if (got === 0) {
        // what is left has no newline yet: the next fold finishes it (an `onTail` reader may take it now)
        if (onTail && !skipping && filled > 0) onTail(buf.subarray(0, filled), base + filled);
        return complete;
      }
      if (budget) budget.bytesLeft -= got;
      filled += got;
      const data = buf.subarray(0, filled); // searches must not run into the stale rest of the buffer
      let start = 0;
      for (;;) {
        const nl = data.indexOf(0x0a, start);
        if (nl < 0) break;
        const end = base + nl + 1;
        complete = end;
        if (skipping) {
          onLine({ kind: 'oversized', prefix: skipping.prefix, bytes: skipping.bytes + nl - start, end });
          skipping = null;
        } else if (nl - start > maxLineBytes) {
          onLine({
            kind: 'oversized',
            prefix: buf.toString('utf8', start, Math.min(nl, start + PREFIX)),
            bytes: nl - start,
            end,
          });
        } else if (onBlock) {
          // the buffer never holds a line over the bound, so every line up to its last newline is whole and bounded
          const last = data.lastIndexOf(0x0a);
          complete = base + last + 1;
          onBlock(buf.subarray(start, last + 1), complete);
          start = last + 1;
          break;
        } else if (nl > start) {
          onLine({ kind: 'line', bytes: buf.subarray(start, nl), end });
        }
        start = nl + 1;
      }
      if (skipping) {
        skipping.bytes += filled - start;
        base += filled;
        filled = 0;
      } else if (filled - start > maxLineBytes) {
        skipping = { prefix: buf.toString('utf8', start, Math.min(filled, start + PREFIX)), bytes: filled - start };
        base += filled;
        filled = 0;
      } else {
        buf.copy(buf, 0, start, filled); // keep the unfinished line at the front
        base += start;
        filled -= start;
      }
      if (reads % CHUNKS_PER_TURN === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    closeSync(fd);
    if (buf.length === CHUNK && spareChunks.length < MAX_SPARE_CHUNKS) spareChunks.push(buf);
  }
}
