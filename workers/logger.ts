import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

/**
 * The one logger of the long-running processes (the worker, `npm start`'s services): JSON lines
 * for log collectors, or readable lines when a person watches the terminal. YOKE_LOG_LEVEL
 * (default info) sets the level.
 */
export function createLogger(name: string): Logger {
  const level = process.env.YOKE_LOG_LEVEL ?? 'info';
  const destination = process.stderr.isTTY
    ? pretty({ destination: 2, sync: true, ignore: 'pid,hostname', translateTime: 'SYS:HH:MM:ss.l' })
    : pino.destination({ fd: 2, sync: true });
  return pino({ name, level, base: { pid: process.pid } }, destination);
}

const TEMPORAL_LEVELS: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

/**
 * Routes the Temporal SDK's own log lines (worker state, workflow and activity logs, which
 * carry workflowId, runId and activity ids in their metadata) through the same logger, so
 * one stream tells what the worker did and for which run.
 */
export function installTemporalLogger(logger: Logger): void {
  const level = (process.env.YOKE_TEMPORAL_LOG_LEVEL ?? 'INFO') as LogLevel;
  Runtime.install({
    logger: new DefaultLogger(level, (entry) => {
      logger[TEMPORAL_LEVELS[entry.level]]({ ...entry.meta, source: 'temporal' }, entry.message);
    }),
  });
}
