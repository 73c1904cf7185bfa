import { CallDigests, pairOrder } from '../../activities/usage/callDigests';

describe('closed call digests', () => {
  test('U10 closed calls are found again after a round trip through the stored form, each kept once, in any order they close', () => {
    const ids = Array.from({ length: 500 }, (_, i) => `msg_${(i * 7919) % 500}`);
    let stored = new CallDigests({}).encode(new Set(ids.slice(0, 300)));
    stored = new CallDigests({ closed_digests: stored }).encode(new Set([...ids.slice(250, 500), 'msg_1']));
    const digests = new CallDigests({ closed_digests: stored });
    for (const id of ids) expect(digests.has(id)).toBe(true);
    expect(digests.has('msg_500')).toBe(false);
    expect(Buffer.from(stored, 'base64').length).toBe(500 * 8); // each once
    expect(new CallDigests({ closed_digests: stored }).encode(new Set())).toBe(stored); // nothing closed: unchanged
  });

  test('U10 calls looked up as they opened are stored under the digests a fresh fold gives them', () => {
    const before = new CallDigests({}).encode(new Set(['a', 'b']));
    const folding = new CallDigests({ closed_digests: before });
    const ids = ['c', 'msg_01XFDUDYJgAACzvnptvVoYEL', 'd', 'a']; // 'a' was closed before: looked up, found
    expect(ids.map((id) => folding.has(id))).toEqual([false, false, false, true]);
    const closed = new Set(['msg_01XFDUDYJgAACzvnptvVoYEL', 'e', 'c']); // 'e' was never looked up
    const stored = folding.encode(closed);
    expect(stored).toBe(new CallDigests({ closed_digests: before }).encode(closed));
    const after = new CallDigests({ closed_digests: stored });
    for (const id of ['a', 'b', 'c', 'e', 'msg_01XFDUDYJgAACzvnptvVoYEL']) expect(after.has(id)).toBe(true);
    expect(after.has('d')).toBe(false); // looked up, never closed: not stored
  });

  test('U10 a checkpoint of the earlier form (base-36 hi:lo strings) keeps every closed call', () => {
    const before = new CallDigests({}).encode(new Set(['a', 'b', 'c']));
    const words = Buffer.from(before, 'base64');
    const legacy = [0, 8, 16].map(
      (o) => `${words.readUInt32LE(o).toString(36)}:${words.readUInt32LE(o + 4).toString(36)}`,
    );
    const converted = new CallDigests({ closed: legacy });
    for (const id of ['a', 'b', 'c']) expect(converted.has(id)).toBe(true);
    expect(converted.has('d')).toBe(false);
    expect(converted.encode(new Set(['d']))).toBe(new CallDigests({}).encode(new Set(['a', 'b', 'c', 'd'])));
  });

  test('U10 new digests are merged in (hi, lo) order, pairs sharing a hi included', () => {
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    const his = [0, 1, 2 ** 32 - 1, 5, 5, 5];
    const pairs: number[] = [];
    for (let i = 0; i < 400; i++) pairs.push(i < 60 ? his[i % his.length]! : next() * 2, i < 60 ? 100 - i : next());
    const order = Array.from(pairOrder(pairs));
    const expected = Array.from({ length: pairs.length / 2 }, (_, i) => i).sort(
      (x, y) => pairs[2 * x]! - pairs[2 * y]! || pairs[2 * x + 1]! - pairs[2 * y + 1]!,
    );
    expect(order.map((i) => [pairs[2 * i], pairs[2 * i + 1]])).toEqual(
      expected.map((i) => [pairs[2 * i], pairs[2 * i + 1]]),
    );
    expect([...order].sort((a, b) => a - b)).toEqual(expected.slice().sort((a, b) => a - b)); // each pair once
  });
});
