/**
 * U9: a Claude transcript row read for the few fields the reader needs (the row's `type`,
 * `requestId`, and `message.id`, `message.model`, `message.usage`'s counts) straight from its
 * bytes: nothing else is decoded or allocated. The whole row is still checked against the JSON
 * grammar, so a row JSON.parse would refuse is never counted here. Any shape the fast path does
 * not cover (an escaped key, a usage that is not an object, an id that is not a string, deep
 * nesting) returns undefined: the caller then parses the row whole, so both paths agree on
 * every row. So does a token count that is not plain digits within 2^53-1 (a sign, a fraction,
 * an exponent, a string, an object, true or false): the whole parse applies the rule that makes
 * such a row invalid (U9 U10); null is 0, as absent.
 */
export interface ClaudeUsageCounts {
  input: number;
  cacheRead: number;
  cacheCreation: number;
  write5m: number;
  write1h: number;
  output: number;
  thinking: number;
}

export interface ClaudeRowFields {
  assistant: boolean;
  /** message.id, else a string requestId, else undefined. */
  key: string | undefined;
  /** message.model; undefined when absent or null. */
  model: string | undefined;
  /** message.usage's counts; undefined when the row has no (truthy) message.usage, or an invalid one. */
  usage: ClaudeUsageCounts | undefined;
  /**
   * U9 U10: message.usage is there but unreadable (not an object, or a count that is not a
   * non-negative integer within 2^53-1): none of its counts may be added. The byte reader never
   * sets it: it defers such a row to the whole parse.
   */
  invalid: boolean;
}

const enum Role {
  Other,
  Top,
  Message,
  Usage,
  CacheCreation,
  OutputDetails,
}

/** The member a value belongs to, when it is one the reader wants. */
const enum Field {
  None,
  Type,
  RequestId,
  Message,
  Id,
  Model,
  Usage,
  Input,
  CacheRead,
  CacheCreationTotal,
  CacheCreation,
  Write5m,
  Write1h,
  Output,
  OutputDetails,
  Thinking,
}

const enum Expect {
  Value,
  ValueOrClose, // after [
  KeyOrClose, // after {
  Key, // after , in an object
  Colon,
  CommaOrClose,
}

const MAX_DEPTH = 64;
const COUNT_FIELDS = Field.Thinking - Field.Input + 1;
const latin = (s: string) => Uint8Array.from(Buffer.from(s, 'latin1'));
const ASSISTANT = latin('assistant');
const NULL = latin('null');
const TRUE = latin('true');
const FALSE = latin('false');

/** Keys the reader wants, per the object they belong to: [role of the object, key, field]. */
const KEYS: [Role, Uint8Array, Field][] = (
  [
    [Role.Top, 'type', Field.Type],
    [Role.Top, 'requestId', Field.RequestId],
    [Role.Top, 'message', Field.Message],
    [Role.Message, 'id', Field.Id],
    [Role.Message, 'model', Field.Model],
    [Role.Message, 'usage', Field.Usage],
    [Role.Usage, 'input_tokens', Field.Input],
    [Role.Usage, 'cache_read_input_tokens', Field.CacheRead],
    [Role.Usage, 'cache_creation_input_tokens', Field.CacheCreationTotal],
    [Role.Usage, 'cache_creation', Field.CacheCreation],
    [Role.Usage, 'output_tokens', Field.Output],
    [Role.Usage, 'output_tokens_details', Field.OutputDetails],
    [Role.CacheCreation, 'ephemeral_5m_input_tokens', Field.Write5m],
    [Role.CacheCreation, 'ephemeral_1h_input_tokens', Field.Write1h],
    [Role.OutputDetails, 'thinking_tokens', Field.Thinking],
  ] as const
).map(([role, key, field]) => [role, latin(key), field]);

const roles = new Uint8Array(MAX_DEPTH + 1);
const counts = new Float64Array(COUNT_FIELDS);
const result: ClaudeRowFields = {
  assistant: false,
  key: undefined,
  model: undefined,
  usage: undefined,
  invalid: false,
};
const reused: ClaudeUsageCounts = {
  input: 0,
  cacheRead: 0,
  cacheCreation: 0,
  write5m: 0,
  write1h: 0,
  output: 0,
  thinking: 0,
};

function same(b: Buffer, start: number, stop: number, word: Uint8Array): boolean {
  if (stop - start !== word.length) return false;
  for (let k = 0; k < word.length; k++) if (b[start + k] !== word[k]) return false;
  return true;
}

/** Per role, the wanted keys and their fields, for an indexed scan (keys are few and short). */
const BY_ROLE: { keys: Uint8Array[]; fields: Field[] }[] = [0, 1, 2, 3, 4, 5].map((role) => ({
  keys: KEYS.filter(([r]) => r === role).map(([, key]) => key),
  fields: KEYS.filter(([r]) => r === role).map(([, , field]) => field),
}));

function fieldOf(b: Buffer, role: Role, start: number, stop: number): Field {
  const { keys, fields } = BY_ROLE[role]!;
  const length = stop - start;
  for (let k = 0; k < keys.length; k++) {
    const key = keys[k]!;
    if (key.length !== length || key[0] !== b[start]) continue;
    if (same(b, start, stop, key)) return fields[k]!;
  }
  return Field.None;
}

/** The two wanted objects of counts (cache_creation, output_tokens_details), as opposed to the counts themselves. */
const isCountObject = (field: Field) => field === Field.CacheCreation || field === Field.OutputDetails;

/** A wanted object of counts that is no object (or null), or a count that is null: 0, as absent. */
function zeroCounts(field: Field): void {
  if (field === Field.CacheCreation) counts[Field.Write5m - Field.Input] = counts[Field.Write1h - Field.Input] = 0;
  else if (field === Field.OutputDetails) counts[Field.Thinking - Field.Input] = 0;
  else counts[field - Field.Input] = 0;
}

/** JSON's number grammar from `i`; the index after it, or -1. */
function numberEnd(b: Buffer, i: number, end: number): number {
  if (b[i] === 0x2d) i++;
  let from = i;
  if (b[i] === 0x30) i++;
  else {
    while (i < end && b[i]! >= 0x30 && b[i]! <= 0x39) i++;
    if (i === from) return -1;
  }
  if (b[i] === 0x2e) {
    from = ++i;
    while (i < end && b[i]! >= 0x30 && b[i]! <= 0x39) i++;
    if (i === from) return -1;
  }
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++;
    if (b[i] === 0x2b || b[i] === 0x2d) i++;
    from = i;
    while (i < end && b[i]! >= 0x30 && b[i]! <= 0x39) i++;
    if (i === from) return -1;
  }
  return i;
}

/**
 * A token count spelled as plain digits, at most 2^53-1; -1 for any other number (a sign, a
 * fraction, an exponent, more digits): the caller defers that row to the whole parse. Up to
 * 2^53 every step is exact, and beyond it the rounded value stays above 2^53-1.
 */
function countValue(b: Buffer, start: number, stop: number): number {
  if (stop - start > 16) return -1;
  let v = 0;
  for (let k = start; k < stop; k++) {
    const d = b[k]! - 0x30;
    if (d < 0 || d > 9) return -1;
    v = v * 10 + d;
  }
  return v <= Number.MAX_SAFE_INTEGER ? v : -1;
}

/** Decoded strings are reused while the same bytes come again (a call's snapshots share id and model). */
const decoded: { raw: Uint8Array; text: string }[] = [
  { raw: new Uint8Array(0), text: '' },
  { raw: new Uint8Array(0), text: '' },
];

function text(b: Buffer, start: number, stop: number, escaped: boolean, slot: number): string {
  if (escaped) return JSON.parse(b.toString('utf8', start - 1, stop + 1)) as string;
  const hit = decoded[slot]!;
  if (same(b, start, stop, hit.raw)) return hit.text;
  hit.raw = Uint8Array.prototype.slice.call(b, start, stop);
  hit.text = b.toString('utf8', start, stop);
  return hit.text;
}

/**
 * One pass over the row: a JSON grammar check with a stack of the objects the reader wants
 * (the row, its message, the usage, the usage's two nested objects). The result object is
 * reused: it is valid until the next call. undefined: not valid JSON, or a shape the caller
 * must parse whole.
 */
export function readClaudeRow(b: Buffer): ClaudeRowFields | undefined {
  const end = b.length;
  let depth = 0;
  let expect = Expect.Value;
  let field = Field.None; // the member whose value comes next
  let assistant = false;
  let hasMessage = false;
  let usage = false;
  // spans of string values (inside the quotes); -1: absent (or null)
  let idStart = -1;
  let idStop = 0;
  let idEscaped = false;
  let modelStart = -1;
  let modelStop = 0;
  let modelEscaped = false;
  let requestStart = -1;
  let requestStop = 0;
  let requestEscaped = false;
  let i = 0;
  while (i < end) {
    const c = b[i]!;
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
      i++;
      continue;
    }
    if (expect === Expect.Colon) {
      if (c !== 0x3a) return undefined;
      expect = Expect.Value;
      i++;
      continue;
    }
    if (expect === Expect.CommaOrClose) {
      if (depth === 0) return undefined; // something after the row's closing brace
      const object = roles[depth] !== 0xff;
      if (c === 0x2c) {
        expect = object ? Expect.Key : Expect.Value;
        i++;
        continue;
      }
      if (c !== (object ? 0x7d : 0x5d)) return undefined;
      depth--;
      i++;
      continue;
    }
    const role = roles[depth]!;
    if (c === 0x22) {
      // a string: a key, or a value
      const start = i + 1;
      let escaped = false;
      for (i = start; i < end; i++) {
        const d = b[i]!;
        if (d === 0x22) break;
        if (d === 0x5c) {
          escaped = true;
          const e = b[i + 1];
          if (e === 0x75) {
            for (let k = i + 2; k < i + 6; k++) {
              const h = b[k];
              if (
                h === undefined ||
                !((h >= 0x30 && h <= 0x39) || (h >= 0x41 && h <= 0x46) || (h >= 0x61 && h <= 0x66))
              )
                return undefined;
            }
            i += 5;
          } else if (
            e === 0x22 ||
            e === 0x5c ||
            e === 0x2f ||
            e === 0x62 ||
            e === 0x66 ||
            e === 0x6e ||
            e === 0x72 ||
            e === 0x74
          )
            i++;
          else return undefined;
        } else if (d < 0x20) return undefined;
      }
      if (i >= end) return undefined;
      const stop = i++;
      if (expect === Expect.Key || expect === Expect.KeyOrClose) {
        if (escaped && role !== Role.Other) return undefined; // an escaped key cannot be compared byte for byte
        field = role === Role.Other ? Field.None : fieldOf(b, role, start, stop);
        expect = Expect.Colon;
        continue;
      }
      if (expect === Expect.ValueOrClose) expect = Expect.Value;
      if (expect !== Expect.Value) return undefined;
      switch (field) {
        case Field.Type:
          assistant = !escaped && same(b, start, stop, ASSISTANT);
          break;
        case Field.RequestId:
          requestStart = start;
          requestStop = stop;
          requestEscaped = escaped;
          break;
        case Field.Id:
          idStart = start;
          idStop = stop;
          idEscaped = escaped;
          break;
        case Field.Model:
          modelStart = start;
          modelStop = stop;
          modelEscaped = escaped;
          break;
        case Field.Message:
          hasMessage = false; // a message that is a string has no usage
          break;
        case Field.Usage:
          return undefined; // usage as a string: the parsed path decides
        case Field.None:
          break;
        default:
          if (!isCountObject(field)) return undefined; // a count as a string: invalid, the parsed path decides
          zeroCounts(field);
      }
      field = Field.None;
      expect = Expect.CommaOrClose;
      continue;
    }
    if (expect === Expect.Key) return undefined;
    if (c === 0x7d && expect === Expect.KeyOrClose) {
      depth--;
      expect = Expect.CommaOrClose;
      i++;
      continue;
    }
    if (c === 0x5d && expect === Expect.ValueOrClose) {
      depth--;
      expect = Expect.CommaOrClose;
      i++;
      continue;
    }
    if (expect === Expect.KeyOrClose) return undefined;
    // a value
    if (c === 0x7b || c === 0x5b) {
      if (depth >= MAX_DEPTH) return undefined;
      let next = Role.Other as Role;
      const object = c === 0x7b;
      if (depth === 0) next = object ? Role.Top : Role.Other;
      else
        switch (field) {
          case Field.Message:
            hasMessage = object;
            idStart = -1;
            modelStart = -1;
            usage = false;
            if (object) next = Role.Message;
            break;
          case Field.Usage:
            if (!object) return undefined; // a usage that is an array: the parsed path decides
            next = Role.Usage;
            usage = true;
            counts.fill(0);
            break;
          case Field.Type:
            assistant = false;
            break;
          case Field.RequestId:
            requestStart = -1;
            break;
          case Field.Id:
          case Field.Model:
            return undefined;
          case Field.None:
            break;
          default:
            if (!isCountObject(field)) return undefined; // a count as an object or array: invalid, the parsed path decides
            zeroCounts(field);
            if (object && field === Field.CacheCreation) next = Role.CacheCreation;
            if (object && field === Field.OutputDetails) next = Role.OutputDetails;
        }
      depth++;
      roles[depth] = c === 0x7b ? next : 0xff;
      expect = c === 0x7b ? Expect.KeyOrClose : Expect.ValueOrClose;
      field = Field.None;
      i++;
      continue;
    }
    // a number or a literal
    let stop: number;
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) stop = numberEnd(b, i, end);
    else if (c === 0x6e) stop = same(b, i, i + 4, NULL) ? i + 4 : -1;
    else if (c === 0x74) stop = same(b, i, i + 4, TRUE) ? i + 4 : -1;
    else if (c === 0x66) stop = same(b, i, i + 5, FALSE) ? i + 5 : -1;
    else return undefined;
    if (stop < 0 || depth === 0) return undefined;
    const isNull = c === 0x6e;
    switch (field) {
      case Field.Type:
        assistant = false;
        break;
      case Field.RequestId:
        requestStart = -1;
        break;
      case Field.Id:
        if (!isNull) return undefined;
        idStart = -1;
        break;
      case Field.Model:
        if (!isNull) return undefined;
        modelStart = -1;
        break;
      case Field.Message:
        hasMessage = false;
        break;
      case Field.Usage:
        if (!isNull) return undefined;
        usage = false;
        break;
      case Field.None:
        break;
      default: {
        if (isCountObject(field) || isNull) zeroCounts(field);
        else {
          // true, false, or a number that is not a plain count: invalid, the parsed path decides
          const v = c === 0x74 || c === 0x66 ? -1 : countValue(b, i, stop);
          if (v < 0) return undefined;
          counts[field - Field.Input] = v;
        }
      }
    }
    field = Field.None;
    expect = Expect.CommaOrClose;
    i = stop;
  }
  if (depth !== 0 || expect !== Expect.CommaOrClose) return undefined;
  const keyed = hasMessage && idStart >= 0;
  result.assistant = assistant;
  result.key = keyed
    ? text(b, idStart, idStop, idEscaped, 0)
    : requestStart >= 0
      ? text(b, requestStart, requestStop, requestEscaped, 0)
      : undefined;
  result.model = hasMessage && modelStart >= 0 ? text(b, modelStart, modelStop, modelEscaped, 1) : undefined;
  if (hasMessage && usage) {
    const u = (result.usage = reused);
    u.input = counts[Field.Input - Field.Input]!;
    u.cacheRead = counts[Field.CacheRead - Field.Input]!;
    u.cacheCreation = counts[Field.CacheCreationTotal - Field.Input]!;
    u.write5m = counts[Field.Write5m - Field.Input]!;
    u.write1h = counts[Field.Write1h - Field.Input]!;
    u.output = counts[Field.Output - Field.Input]!;
    u.thinking = counts[Field.Thinking - Field.Input]!;
  } else result.usage = undefined;
  return result;
}
