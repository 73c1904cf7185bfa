import { POLLER_FRESH_MS, freshPollers } from '../../cli/temporal';

describe('is a worker polling?', () => {
  test('judged by recent poll times: a poller the server still lists minutes after its worker died does not count', () => {
    const now = Date.parse('2026-11-30T08:00:00Z');
    const polled = (msAgo: number) => ({ lastAccessTime: { seconds: (now - msAgo) / 1000, nanos: 0 } });
    expect(freshPollers([polled(10_000)], now)).toBe(1); // a live worker renews its long poll every minute
    expect(freshPollers([polled(POLLER_FRESH_MS + 1_000)], now)).toBe(0);
    expect(freshPollers([polled(4 * 60_000), polled(30_000)], now)).toBe(1); // the stale one is ignored
    expect(freshPollers([{ lastAccessTime: null }], now)).toBe(0);
  });
});
