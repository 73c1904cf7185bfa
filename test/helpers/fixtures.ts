import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { sql } from 'kysely';
import type { Database } from '../../db/database';
import { claimActivities } from '../../activities/claims';
import { projectActivities } from '../../activities/projects';
import { sessionActivities } from '../../activities/sessions';
import { sweepActivities } from '../../activities/sweep';
import { testMachineActivities } from '../../activities/testMachines';
import type { LineOptions } from '../../activities/waitingLine';
import { YokeError } from '../../domain/errors';

/** The activities under test, over one database. */
export function services(db: Kysely<Database>, line?: Partial<LineOptions>) {
  return {
    ...claimActivities({ db, line }),
    ...projectActivities({ db }),
    ...sessionActivities({ db, line }),
    ...sweepActivities({ db, line }),
    ...testMachineActivities({ db, line }),
  };
}

export type Services = ReturnType<typeof services>;

/** Two projects, an operator with a steering seat and claims.release on `web`, and two workers. */
export async function seedLab(s: Services) {
  await s.createProject({ name: 'web', itemPrefix: 'WEB' });
  await s.createProject({ name: 'api', itemPrefix: 'API' });
  await s.grantPermission({ project: 'web', actor: 'ops', permission: 'claims.release' });
  await s.registerSession({ sessionId: 'op', actorId: 'ops', project: 'web' });
  await s.takeSteeringSeat({ sessionId: 'op', project: 'web' });
  await s.registerSession({ sessionId: 'w1', actorId: 'alice', project: 'web' });
  await s.registerSession({ sessionId: 'w2', actorId: 'bob', project: 'web' });
  await s.registerSession({ sessionId: 'a1', actorId: 'carol', project: 'api' });
  await addTestMachines(s, ['lab-1', 'lab-2', 'mac-mini-lab']);
}

const PINNED_HOST_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMGNz6n5Ojq7Pir4G+MLU4/bQglP1oXmiiK8BiLq9Fz4';

/**
 * C3: a QA host hold names a registered machine. Registers machines whose host key is pinned
 * from a file (no SSH at add), for tests that hold machines without running checks on them.
 */
export async function addTestMachines(s: Pick<Services, 'addTestMachine'>, names: string[]): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'yoke-hostkey-'));
  const hostKeyFile = join(dir, 'host_key.pub');
  writeFileSync(hostKeyFile, `${PINNED_HOST_KEY}\n`);
  for (const name of names)
    await s.addTestMachine({ name, host: '127.0.0.1', port: 22, user: 'qa', credential: 'none', hostKeyFile });
}

/** Awaits a promise expected to be refused and returns the refusal. */
export async function refusalOf(p: Promise<unknown>): Promise<YokeError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof YokeError) return err;
    throw err;
  }
  throw new Error('expected a refusal, but the call succeeded');
}

/** Moves a session's heartbeat into the past, as if it had gone quiet that long ago. */
export async function ageSession(db: Kysely<Database>, sessionId: string, seconds: number): Promise<void> {
  await db
    .updateTable('sessions')
    .set({ heartbeat_at: sql`now() - make_interval(secs => ${seconds})` })
    .where('session_id', '=', sessionId)
    .execute();
}
