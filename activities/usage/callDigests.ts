import { endianness } from 'node:os';

/**
 * U6/U10: the Claude calls a session has closed, kept as 64-bit digests of their ids (two
 * 32-bit FNV-1a lanes, each finished with murmur3's mix: a session of a million calls
 * collides with odds near 3e-8), so a replay or copy of a call already counted is never
 * counted again. They are stored sorted and packed (two little-endian uint32 a call, base64)
 * and looked up by binary search in the decoded array: an incremental fold decodes them
 * natively instead of building a set of every call the session ever made, and one that
 * closes no call writes the stored string back untouched.
 */
let hi = 0;
let lo = 0;

/** Sets `hi`/`lo` to the id's digest. */
function digest(id: string): void {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ id.length;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  hi = mix(a);
  lo = mix(b);
}

function mix(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

const BIG_ENDIAN = endianness() === 'BE';

function fromBase64(text: string): Uint32Array {
  const bytes = Buffer.from(text, 'base64');
  const words = new Uint32Array(bytes.length >>> 2); // a copy: aligned, whatever the pool's offset
  Buffer.from(words.buffer).set(bytes.subarray(0, words.length * 4));
  if (BIG_ENDIAN) Buffer.from(words.buffer).swap32();
  return words;
}

function toBase64(words: Uint32Array): string {
  const bytes = Buffer.from(words.buffer, words.byteOffset, words.byteLength);
  if (!BIG_ENDIAN) return bytes.toString('base64');
  return Buffer.from(bytes).swap32().toString('base64');
}

/** The stored digests, sorted (hi, lo) pairs; the base-36 `hi:lo` strings of older checkpoints are converted. */
function decode(stored: { closed_digests?: string; closed?: string[] }): Uint32Array {
  if (stored.closed_digests !== undefined) return fromBase64(stored.closed_digests);
  const pairs: number[] = [];
  for (const d of stored.closed ?? []) {
    const [a, b] = d.split(':');
    pairs.push(parseInt(a!, 36), parseInt(b!, 36));
  }
  return merged(new Uint32Array(0), pairs);
}

/** The index (in pairs) of the first digest not below (h, l). */
function lowerBound(words: Uint32Array, h: number, l: number): number {
  let low = 0;
  let high = words.length >>> 1;
  while (low < high) {
    const mid = (low + high) >>> 1;
    const mh = words[2 * mid]!;
    if (mh < h || (mh === h && words[2 * mid + 1]! < l)) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** Pair indices packed below a 32-bit `hi` in a double stay exact (2^32 * 2^21 = 2^53). */
const INDEX_SPAN = 2 ** 21;

/**
 * The indices of the (hi, lo) pairs in ascending order. The pairs are sorted natively as
 * doubles (`hi` with the pair's index below it), not by a comparator called per comparison,
 * which an incremental fold's cold process ran in the interpreter; pairs sharing a `hi` (rare)
 * are then put in `lo` order.
 */
export function pairOrder(pairs: number[]): ArrayLike<number> {
  const count = pairs.length >>> 1;
  if (count >= INDEX_SPAN)
    return Array.from({ length: count }, (_, i) => i).sort(
      (x, y) => pairs[2 * x]! - pairs[2 * y]! || pairs[2 * x + 1]! - pairs[2 * y + 1]!,
    );
  const keys = new Float64Array(count);
  for (let i = 0; i < count; i++) keys[i] = pairs[2 * i]! * INDEX_SPAN + i;
  keys.sort();
  const order = new Uint32Array(count);
  for (let i = 0; i < count; i++) {
    const at = keys[i]! % INDEX_SPAN;
    const h = pairs[2 * at]!;
    const l = pairs[2 * at + 1]!;
    let j = i;
    for (; j > 0 && pairs[2 * order[j - 1]!] === h && pairs[2 * order[j - 1]! + 1]! > l; j--) order[j] = order[j - 1]!;
    order[j] = at;
  }
  return order;
}

/** `words` with the (hi, lo) pairs added, sorted, each once: the runs between new pairs are copied whole. */
function merged(words: Uint32Array, pairs: number[]): Uint32Array {
  const order = pairOrder(pairs);
  const out = new Uint32Array(words.length + pairs.length);
  let o = 0;
  let p = 0; // words copied
  for (let k = 0; k < order.length; k++) {
    const i = order[k]!;
    const h = pairs[2 * i]!;
    const l = pairs[2 * i + 1]!;
    const at = lowerBound(words, h, l) * 2;
    if (at > p) {
      out.set(words.subarray(p, at), o);
      o += at - p;
      p = at;
    }
    if (p < words.length && words[p] === h && words[p + 1] === l) continue; // known already
    if (o > 0 && out[o - 2] === h && out[o - 1] === l) continue; // twice in this fold
    out[o++] = h;
    out[o++] = l;
  }
  out.set(words.subarray(p), o);
  return out.subarray(0, o + words.length - p);
}

/** Decoded only when a lookup needs them. */
export class CallDigests {
  private words: Uint32Array | undefined;
  /** Digests `has` worked out (id -> index in `pairs`): a call looked up when it opened is not digested again when it closes. */
  private readonly looked = new Map<string, number>();
  private readonly pairs: number[] = [];

  constructor(private readonly stored: { closed_digests?: string; closed?: string[] }) {}

  private decoded(): Uint32Array {
    return (this.words ??= decode(this.stored));
  }

  /** Whether a call with this id was closed before this fold. */
  has(id: string): boolean {
    const words = this.decoded();
    if (words.length === 0) return false;
    digest(id);
    this.looked.set(id, this.pairs.length);
    this.pairs.push(hi, lo);
    const at = lowerBound(words, hi, lo) * 2;
    return at < words.length && words[at] === hi && words[at + 1] === lo;
  }

  /** The stored form with the calls closed by this fold added. */
  encode(closedNow: Set<string>): string {
    if (closedNow.size === 0 && this.stored.closed_digests !== undefined) return this.stored.closed_digests;
    const pairs: number[] = [];
    for (const id of closedNow) {
      const at = this.looked.get(id);
      if (at === undefined) {
        digest(id);
        pairs.push(hi, lo);
      } else pairs.push(this.pairs[at]!, this.pairs[at + 1]!);
    }
    return toBase64(merged(this.decoded(), pairs));
  }
}
