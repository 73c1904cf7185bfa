import { decimalIdSchema } from '../../cli/context';

/** Issue 15: an id past its column's bound is refused naming that bound, not JavaScript's. */
test('issue 15: an id beyond the id range names the id bound 2147483647, whatever the size', () => {
  const schema = decimalIdSchema('a claim id');
  for (const value of ['3000000000', '99999999999999999999']) {
    const parsed = schema.safeParse(value);
    expect(parsed.success).toBe(false);
    expect(parsed.error!.issues[0]!.message).toMatch(/2147483647/);
  }
  expect(schema.safeParse('0').success).toBe(false);
  expect(schema.safeParse('12').data).toBe(12);
});
