import { DEFAULT_SSH_TIMEOUTS } from '../../domain/timeouts';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { testMachineName } from '../../domain/testMachineName';
import type { SshTimeouts } from '../hosts/ssh';
import { lineDeps, type LineOptions } from '../waitingLine';
import { beginCheck, expireReservation, finishCheck, runCheckCommand, type CheckDeps } from './checks';
import {
  addTestMachine,
  addTestMachineCopyingKey,
  listTestMachines,
  listWaits,
  removeTestMachine,
  repinHostKey,
} from './machines';

export type { CheckOutcome } from './checks';
export type { CheckRecord, TestMachineView, WaitView } from './machines';
export { listWaits } from './machines';

/**
 * Test machines (W1-W9): the catalogue in machines.ts, verification and golden capture in
 * checks.ts, each operation a top-level `(deps, input)` function bound here to one set of
 * dependencies.
 */
export function testMachineActivities(deps: {
  db: Kysely<Database>;
  ssh?: Partial<SshTimeouts>;
  line?: Partial<LineOptions>;
}) {
  const d: CheckDeps = { ...lineDeps(deps.db, deps.line), ssh: { ...DEFAULT_SSH_TIMEOUTS, ...deps.ssh } };
  // C3: every machine name that enters is brought to its one spelling
  const named = <T extends { name?: string }>(i: T): T =>
    i.name === undefined ? i : { ...i, name: testMachineName(i.name) };
  const machine = <T extends { testMachine?: string }>(i: T): T =>
    i.testMachine === undefined ? i : { ...i, testMachine: testMachineName(i.testMachine) };
  return {
    addTestMachine: (input: Parameters<typeof addTestMachine>[1]) => addTestMachine(d, named(input)),
    addTestMachineCopyingKey: (input: Parameters<typeof addTestMachineCopyingKey>[1]) =>
      addTestMachineCopyingKey(d, named(input)),
    listTestMachines: (filter?: { name?: string }) => listTestMachines(d, filter && named(filter)),
    removeTestMachine: (input: { name: string }) => removeTestMachine(d, named(input)),
    repinHostKey: (input: { name: string; hostKeyFile: string }) => repinHostKey(d, named(input)),
    listWaits: (filter: Parameters<typeof listWaits>[1]) => listWaits(d, machine(filter)),
    beginCheck: (input: Parameters<typeof beginCheck>[1]) => beginCheck(d, machine(input)),
    runCheckCommand: (input: Parameters<typeof runCheckCommand>[1], control?: Parameters<typeof runCheckCommand>[2]) =>
      runCheckCommand(d, machine(input), control),
    finishCheck: (input: Parameters<typeof finishCheck>[1]) => finishCheck(d, machine(input)),
    expireReservation: (input: Parameters<typeof expireReservation>[1]) => expireReservation(d, machine(input)),
  };
}

export type TestMachineActivities = ReturnType<typeof testMachineActivities>;
