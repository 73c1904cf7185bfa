import type { Client } from '@temporalio/client';
import type { LineNotifier } from '../activities/waitingLine';
import type { QaNotifier } from '../activities/qa/ending';
import type { TakeoverNotifier } from '../activities/runs/takeover';
import { YokeError, unreachable, type ErrorKind } from '../domain/errors';
import type { YokeConfig } from '../config/yokeConfig';
import { temporalConnectOptions } from '../temporal/connection';

/** A live worker's long poll lasts about a minute; a poll older than this is a worker that is gone. */
export const POLLER_FRESH_MS = 75_000;

/** Pollers whose last poll is recent (the server keeps dead ones listed for about 5 minutes). */
export function freshPollers(
  pollers: { lastAccessTime?: { seconds?: unknown; nanos?: number | null } | null }[],
  nowMs: number,
): number {
  return pollers.filter((p) => {
    const seconds = Number(p.lastAccessTime?.seconds ?? 0);
    return nowMs - seconds * 1000 < POLLER_FRESH_MS;
  }).length;
}

/**
 * A notifier whose Temporal adapter is loaded (and the client connected) only when one of its
 * methods is called: each call waits for `load`, then forwards its arguments. `methods` names
 * every method of the port, so the compiler refuses a port that gains one not forwarded here.
 */
function onFirstCall<T extends object>(load: () => Promise<T>, methods: { [K in keyof Required<T>]: true }): T {
  const port: Record<string, (...args: unknown[]) => Promise<unknown>> = {};
  for (const name of Object.keys(methods))
    port[name] = async (...args) => {
      const adapter = await load();
      return Reflect.apply(adapter[name as keyof T] as (...a: unknown[]) => Promise<unknown>, adapter, args);
    };
  return port as T;
}

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
    const load = async () =>
      (await import('../temporal/lineSignals')).temporalLineNotifier(await this.get(), this.config.taskQueue);
    return onFirstCall(load, { joined: true, reserved: true, cancelled: true });
  }

  /** Tells QA workflows and run workflows about an execution's end, connecting only when needed. */
  qaNotifier(): QaNotifier {
    const load = async () => (await import('../temporal/qaSignals')).temporalQaNotifier(await this.get());
    return onFirstCall(load, { executionEnded: true, runQaSettled: true, casesRecorded: true });
  }

  /** Tells moved executions and the superseded run's workflow after a takeover (T2), connecting only when needed. */
  takeoverNotifier(): TakeoverNotifier {
    const load = async () => (await import('../temporal/takeoverSignals')).temporalTakeoverNotifier(await this.get());
    return onFirstCall(load, { executionMoved: true, runSuperseded: true });
  }

  /**
   * True when a worker polled the task queue recently. The server lists a poller for minutes
   * after its worker died; a live worker renews its long poll at least every minute, so only
   * a poll newer than POLLER_FRESH_MS counts.
   */
  async hasWorker(): Promise<boolean> {
    const client = await this.get();
    const { temporal } = await import('@temporalio/proto');
    const described = await client.workflowService.describeTaskQueue({
      namespace: this.config.temporal.namespace,
      taskQueue: { name: this.config.taskQueue },
      taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    });
    return freshPollers(described.pollers ?? [], Date.now()) > 0;
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

/**
 * Waits for a workflow's result, but never forever (exit 3 with the reason): not past
 * `limitMs`, and not once no worker has polled recently (the workflow would wait for one).
 * A refusal raised inside comes back as its YokeError.
 */
export async function boundedResult<T>(
  temporal: LazyTemporal,
  handle: { workflowId: string; result(): Promise<unknown> },
  opts: { limitMs: number; what: string; checkEveryMs?: number },
): Promise<T> {
  // The result is a long poll the client retries: one left running after the command gives up
  // (no worker, its time ran out) outlives the connection's close and dies on its closed
  // channel as an uncaught error. It is aborted on the way out, whichever way that is.
  const abandon = new AbortController();
  const client = await temporal.get();
  const settled = client
    .withAbortSignal(abandon.signal, () => handle.result())
    .then(
      (value) => ({ value: value as T }),
      (error: unknown) => ({ error }),
    );
  try {
    return await waitBounded(temporal, handle, settled, opts);
  } finally {
    abandon.abort();
  }
}

async function waitBounded<T>(
  temporal: LazyTemporal,
  handle: { workflowId: string },
  settled: Promise<{ value: T } | { error: unknown }>,
  opts: { limitMs: number; what: string; checkEveryMs?: number },
): Promise<T> {
  const started = Date.now();
  for (;;) {
    const tick = new Promise<null>((r) => setTimeout(() => r(null), opts.checkEveryMs ?? 5_000).unref());
    const done = await Promise.race([settled, tick]);
    if (done) {
      if ('error' in done) throw yokeErrorFromFailure(done.error) ?? done.error;
      return done.value;
    }
    if (Date.now() - started > opts.limitMs) {
      throw unreachable('wait_timeout', `${opts.what} did not finish within ${Math.round(opts.limitMs / 1000)} s`, {
        recovery: `it may still finish: temporal workflow describe --workflow-id ${handle.workflowId}`,
        details: { workflow_id: handle.workflowId },
      });
    }
    if (!(await temporal.hasWorker())) {
      throw unreachable(
        'no_worker',
        `no yoke worker has polled its task queue in the last ${POLLER_FRESH_MS / 1000} s; ${opts.what} waits in workflow ${handle.workflowId} until one runs`,
        {
          recovery: 'start a worker (npm start, or node dist/workers/main.js with the same settings)',
          details: { workflow_id: handle.workflowId },
        },
      );
    }
  }
}
