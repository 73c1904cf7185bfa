/**
 * Waits until a read satisfies a condition, re-reading every `everyMs` up to a deadline, and
 * returns the value that satisfied it. Deadlines are in time, not tries, so a loaded machine
 * gets the same patience as a quiet one.
 */
export async function until<T>(
  read: () => Promise<T>,
  ok: (value: T) => boolean,
  what: string,
  { timeoutMs = 60_000, everyMs = 100 }: { timeoutMs?: number; everyMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** `until` for a condition that is its own read. */
export async function untilTrue(
  condition: () => Promise<boolean>,
  what: string,
  options?: { timeoutMs?: number; everyMs?: number },
): Promise<void> {
  await until(condition, (v) => v, what, options);
}
