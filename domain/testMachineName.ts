/**
 * C3: one physical machine has one name. Machine names are case-insensitive and kept in lower
 * case: `QA_HOST:LAB3` and `QA_HOST:lab3` are one hold on one machine, and `test-machine add
 * LAB3` adds `lab3`. Applied wherever a machine name enters (operator keys, test-machine
 * commands, checks), so every stored row and every comparison sees the one spelling.
 */
export function testMachineName(raw: string): string {
  return raw.toLowerCase();
}
