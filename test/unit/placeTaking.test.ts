import { placeToTake } from '../../domain/placeTaking';

describe('W6 place taking', () => {
  const predecessor = {
    abortedWhileHolding: true,
    grantedWaitQueuedAts: ['2026-11-29T10:05:00.000Z', '2026-11-29T10:01:00.000Z'],
    leaseClaimedAts: ['2026-11-29T10:03:00.000Z'],
  };

  test('W6 a joiner that never held the host takes the earliest queued_at or claimed_at of the aborted predecessor', () => {
    expect(placeToTake({ hasHeldHost: false }, predecessor)).toBe('2026-11-29T10:01:00.000Z');
    expect(placeToTake({ hasHeldHost: false }, { ...predecessor, grantedWaitQueuedAts: [] })).toBe(
      '2026-11-29T10:03:00.000Z',
    );
  });

  test('W6 no place is taken when the joiner held the host, the predecessor was not aborted holding it, or there is none', () => {
    expect(placeToTake({ hasHeldHost: true }, predecessor)).toBeNull();
    expect(placeToTake({ hasHeldHost: false }, { ...predecessor, abortedWhileHolding: false })).toBeNull();
    expect(placeToTake({ hasHeldHost: false }, undefined)).toBeNull();
    expect(
      placeToTake({ hasHeldHost: false }, { abortedWhileHolding: true, grantedWaitQueuedAts: [], leaseClaimedAts: [] }),
    ).toBeNull();
  });
});
