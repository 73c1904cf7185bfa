import { createReadStream } from 'node:fs';

/**
 * U9: readers stream an artifact line by line from a byte offset with fixed memory. A line
 * longer than `maxLineBytes` is never held whole: it is skipped and reported with its first
 * bytes, so the reader can tell whether it mattered. A final line without its newline is
 * still being written: it is left for the next fold, so the next offset never splits a row.
 * Lines come as bytes: a reader decodes only the lines that can matter to it.
 */
export type ScannedLine =
  { kind: 'line'; bytes: Buffer; end: number } | { kind: 'oversized'; prefix: string; bytes: number; end: number };

export async function* scanLines(path: string, fromOffset: number, maxLineBytes: number): AsyncGenerator<ScannedLine> {
  const stream = createReadStream(path, { start: fromOffset, highWaterMark: 4 << 20 });
  let carry: Buffer[] = []; // the start of a line that continues into the next chunk
  let held = 0;
  let skipping: { prefix: string; bytes: number } | null = null;
  let position = fromOffset;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      const piece = chunk.subarray(start, nl < 0 ? chunk.length : nl);
      if (skipping) {
        skipping.bytes += piece.length;
      } else if (held + piece.length > maxLineBytes) {
        const head = Buffer.concat([...carry, piece.subarray(0, 4096)]).subarray(0, 4096);
        skipping = { prefix: head.toString('utf8'), bytes: held + piece.length };
        carry = [];
        held = 0;
      } else if (nl < 0) {
        carry.push(Buffer.from(piece)); // copy: the chunk's memory is reused
        held += piece.length;
      }
      if (nl < 0) break;
      const end = position + nl + 1;
      if (skipping) {
        yield { kind: 'oversized', prefix: skipping.prefix, bytes: skipping.bytes, end };
        skipping = null;
      } else {
        const bytes = carry.length ? Buffer.concat([...carry, piece]) : piece;
        if (bytes.length) yield { kind: 'line', bytes, end };
      }
      carry = [];
      held = 0;
      start = nl + 1;
    }
    position += chunk.length;
  }
}
