import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createDb } from '../db/pool';
import { migrateToLatest } from '../db/migrate';
import { connectionMayMigrate } from '../db/actors';
import { createActivities, FOLDS_AT_ONCE } from './activities';
import { recordDriverFreshMs } from '../activities/deploymentSettings';
import { loadConfig } from '../config/yokeConfig';
import { ensureSweepSchedule } from '../temporal/schedules';
import { temporalConnectOptions } from '../temporal/connection';
import { createLogger, installTemporalLogger } from './logger';
import { HEARTBEAT_THROTTLE } from './heartbeatThrottle';

const logger = createLogger('yoke-worker');

/**
 * The yoke worker: runs every workflow and activity on the configured task queue, and keeps
 * the sweep schedule in place. Run as many as you like against one cluster; they share the
 * task queue.
 */
async function main(): Promise<void> {
  const config = loadConfig();
  installTemporalLogger(logger);
  // Issue 13: the worker connects as its own role when YOKE_WORKER_DATABASE_URL names one.
  const db = createDb(config.workerDatabaseUrl);
  const foldDb = createDb(config.workerDatabaseUrl, { max: FOLDS_AT_ONCE });
  if (await connectionMayMigrate(db)) await migrateToLatest(db);
  else logger.info('connected as a worker role: schema migrations are left to an admin (yoke db migrate)');
  // R1: the deployment's driver freshness is this worker's YOKE_DRIVER_FRESH_SECONDS; Postgres and the CLI read it there.
  await recordDriverFreshMs(db, config.driverFreshMs);
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
    ...HEARTBEAT_THROTTLE,
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
