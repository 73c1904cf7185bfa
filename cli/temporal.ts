import type { Client } from '@temporalio/client';
import type { LineNotifier } from '../activities/waitingLine';
import type { QaNotifier } from '../activities/qa/ending';
import { YokeError, unreachable, type ErrorKind } from '../domain/errors';
import type { YokeConfig } from '../config/yokeConfig';
import { temporalConnectOptions } from '../temporal/connection';

/**
 * The CLI's Temporal client, connected on first use only: most commands never need it, and
 * loading it costs half a second (DESIGN.md, "The CLI starts fast").
 */
export class LazyTemporal {
  private client?: Promise<Client>;

  constructor(private readonly config: YokeConfig) {}

  get(): Promise<Client> {
    this.client ??= (async () => {
      const { Client, Connection } = await import('@temporalio/client');
      try {
        const connection = await Connection.connect({
          ...temporalConnectOptions(this.config.temporal),
          connectTimeout: '5 seconds',
        });
        return new Client({ connection, namespace: this.config.temporal.namespace });
      } catch (err) {
        throw unreachable(
          'temporal_unreachable',
          `cannot reach Temporal at ${this.config.temporal.address}: ${(err as Error).message}`,
          {
            recovery:
              'start the local stack with `npm start`, or point TEMPORAL_ADDRESS (and TLS/API key settings) at your cluster',
            details: { address: this.config.temporal.address, namespace: this.config.temporal.namespace },
          },
        );
      }
    })();
    return this.client;
  }

  /** A waiting-line notifier that connects only when there is something to signal. */
  lineNotifier(): LineNotifier {
    const notifier = async () => {
      const { temporalLineNotifier } = await import('../temporal/lineSignals');
      return temporalLineNotifier(await this.get(), this.config.taskQueue);
    };
    return {
      joined: async (w) => (await notifier()).joined(w),
      reserved: async (r) => (await notifier()).reserved(r),
      cancelled: async (c) => (await notifier()).cancelled(c),
    };
  }

  /** Tells QA workflows and run workflows about an execution's end, connecting only when needed. */
  qaNotifier(): QaNotifier {
    const notifier = async () => {
      const { temporalQaNotifier } = await import('../temporal/qaSignals');
      return temporalQaNotifier(await this.get());
    };
    return {
      executionEnded: async (id, status) => (await notifier()).executionEnded(id, status),
      runQaSettled: async (runId) => (await notifier()).runQaSettled(runId),
    };
  }

  /** True when at least one worker polls the task queue for workflow tasks. */
  async hasWorker(): Promise<boolean> {
    const client = await this.get();
    const { temporal } = await import('@temporalio/proto');
    const described = await client.workflowService.describeTaskQueue({
      namespace: this.config.temporal.namespace,
      taskQueue: { name: this.config.taskQueue },
      taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    });
    return (described.pollers?.length ?? 0) > 0;
  }

  /** Refuses early when no worker polls the task queue, for commands that wait on one. */
  async requireWorker(): Promise<Client> {
    const client = await this.get();
    if (!(await this.hasWorker())) {
      throw unreachable(
        'no_worker',
        `no yoke worker polls task queue "${this.config.taskQueue}" on ${this.config.temporal.address}`,
        {
          recovery:
            'start one with `npm start` (or `node dist/workers/main.js` with the same TEMPORAL_* and YOKE_TASK_QUEUE settings)',
          details: { task_queue: this.config.taskQueue },
        },
      );
    }
    return client;
  }

  async close(): Promise<void> {
    if (!this.client) return;
    try {
      await (await this.client).connection.close();
    } catch {
      // never connected: nothing to close
    }
  }
}

/**
 * A refusal raised in an activity crosses Temporal as an ApplicationFailure whose type is the
 * specification's code; this finds it in a failure chain and rebuilds the YokeError.
 */
export function yokeErrorFromFailure(err: unknown): YokeError | undefined {
  let current: unknown = err;
  while (current && typeof current === 'object') {
    const f = current as { type?: unknown; message?: string; details?: unknown[]; cause?: unknown; name?: string };
    if (f.name === 'ApplicationFailure' || (typeof f.type === 'string' && Array.isArray(f.details))) {
      const extra = (f.details?.[0] ?? {}) as {
        recovery?: string;
        details?: Record<string, unknown>;
        kind?: ErrorKind;
      };
      if (typeof f.type === 'string' && extra.recovery) {
        return new YokeError(extra.kind ?? 'refusal', f.type, f.message ?? f.type, extra.recovery, extra.details ?? {});
      }
    }
    current = f.cause;
  }
  return undefined;
}
