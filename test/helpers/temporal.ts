import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import {
  bundleWorkflowCode,
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { createActivities } from '../../workers/activities';
import { HEARTBEAT_THROTTLE } from '../../workers/heartbeatThrottle';

// Workers log warnings and errors only, so test output stays readable.
Runtime.install({ logger: new DefaultLogger('WARN') });

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;

/** Jest never transforms workflow code: the worker bundles it, once per test file. */
function workflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  bundle ??= bundleWorkflowCode({
    workflowsPath: require.resolve('../../workflows'),
    logger: {
      log: () => undefined,
      info: () => undefined,
      warn: () => undefined,
      error: console.error,
      debug: () => undefined,
      trace: () => undefined,
    },
  });
  return bundle;
}

export interface TestWorker {
  client: Client;
  taskQueue: string;
  shutdown(): Promise<void>;
}

/** A real worker on the run's dev server, on a task queue of its own, over the test's database. */
export async function startTestWorker(
  db: Kysely<Database>,
  opts: {
    reservationLifetimeMs?: number;
    commandTimeoutMs?: number;
    /** The SSH handshake's bound (3 s unless a test needs one past the check's heartbeat timeout). */
    connectTimeoutMs?: number;
    /** Wraps the worker's activities (a test that must act at an exact moment inside one). */
    wrap?: (activities: ReturnType<typeof createActivities>) => ReturnType<typeof createActivities>;
  } = {},
): Promise<TestWorker> {
  const address = process.env.YOKE_TEST_TEMPORAL_ADDRESS!;
  const nativeConnection = await NativeConnection.connect({ address });
  const connection = await Connection.connect({ address });
  const client = new Client({ connection });
  const taskQueue = `test-${randomUUID()}`;
  const worker = await Worker.create({
    connection: nativeConnection,
    taskQueue,
    workflowBundle: await workflowBundle(),
    ...HEARTBEAT_THROTTLE,
    activities: (opts.wrap ?? ((a) => a))(
      createActivities({
        db,
        temporal: { client, taskQueue },
        reservationLifetimeMs: opts.reservationLifetimeMs,
        ssh: { connectTimeoutMs: opts.connectTimeoutMs ?? 3_000, commandTimeoutMs: opts.commandTimeoutMs ?? 30_000 },
      }),
    ),
  });
  const running = worker.run();
  return {
    client,
    taskQueue,
    shutdown: async () => {
      worker.shutdown();
      await running;
      await connection.close();
      await nativeConnection.close();
    },
  };
}

/** Reads until the answer is what the test waits for (a workflow's query, a row): the event, never a sleep. */
export { until } from './until';
