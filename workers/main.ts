import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createDb } from '../db/pool';
import { migrateToLatest } from '../db/migrate';
import { createActivities, FOLDS_AT_ONCE } from './activities';
import { loadConfig } from '../config/yokeConfig';
import { ensureSweepSchedule } from '../temporal/schedules';
import { temporalConnectOptions } from '../temporal/connection';
import { createLogger, installTemporalLogger } from './logger';

const logger = createLogger('yoke-worker');

/**
 * The yoke worker: runs every workflow and activity on the configured task queue, and keeps
 * the sweep schedule in place. Run as many as you like against one cluster; they share the
 * task queue.
 */
async function main(): Promise<void> {
  const config = loadConfig();
  installTemporalLogger(logger);
  const db = createDb(config.databaseUrl);
  const foldDb = createDb(config.databaseUrl, { max: FOLDS_AT_ONCE });
  await migrateToLatest(db);
  const connectOptions = temporalConnectOptions(config.temporal);
  const connection = await NativeConnection.connect(connectOptions);
  const clientConnection = await Connection.connect(connectOptions);
  const client = new Client({ connection: clientConnection, namespace: config.temporal.namespace });
  await ensureSweepSchedule(client, {
    taskQueue: config.taskQueue,
    intervalMs: config.sweepIntervalMs,
    staleAfterMs: config.staleAfterMs,
  });

  const worker = await Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.taskQueue,
    workflowsPath: require.resolve('../workflows'),
    // SIGTERM (or SIGINT): stop polling, give running activities 10 s, then cancel them; one
    // that ignores its cancellation for 20 s more no longer holds the process.
    shutdownGraceTime: '10 seconds',
    shutdownForceTime: '30 seconds',
    activities: createActivities({
      db,
      foldDb,
      temporal: { client, taskQueue: config.taskQueue },
      reservationLifetimeMs: config.reservationLifetimeMs,
      ssh: config.ssh,
    }),
  });
  logger.info(
    { taskQueue: config.taskQueue, address: config.temporal.address, namespace: config.temporal.namespace },
    'yoke worker polling',
  );
  try {
    await worker.run(); // returns after SIGINT/SIGTERM, once in-flight tasks finish
  } finally {
    // A pool waits for its checked-out connections; an activity abandoned above may hold one.
    const closed = Promise.all([clientConnection.close(), connection.close(), db.destroy(), foldDb.destroy()]);
    await Promise.race([closed, new Promise((r) => setTimeout(r, 5_000).unref())]);
  }
}

main().then(
  () => process.exit(0), // nothing left to wait for, whatever a cancelled activity left running
  (err: unknown) => {
    logger.fatal({ err }, 'yoke worker stopped');
    process.exit(1);
  },
);
