import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { claimActivities } from '../activities/claims';
import { temporalLineNotifier } from '../temporal/lineSignals';
import { projectActivities } from '../activities/projects';
import { sessionActivities } from '../activities/sessions';
import { YokeError } from '../domain/errors';
import { createActivities } from '../workers/activities';
import { yokeHome } from '../config/yokeConfig';
import { awaitTurn, cancelWait, hostReserved, turnConsumed, waitWorkflowId } from '../workflows/definitions';
import { registerBenchMachines, withBenchDatabase } from './benchDatabase';
import { findTemporalCli } from '../scripts/temporalCli';
import { startDevServerOnFreePort } from '../scripts/temporalServer';
import { ascending, quantile } from './stats';
import { runBench } from './benchMain';

/**
 * Hand-off latency: from the moment a holder releases a test machine to the moment the next
 * waiter, woken by its wait workflow's signal, holds it (W7). Measured next to a bare
 * Temporal signal round trip on the same server in the same run, one after each hand-off: a
 * signal to a waiting workflow until the waiter's pending update returns. Prints one JSON
 * object.
 */
const HANDOFFS = Number(process.env.BENCH_HANDOFFS ?? 200);
const MACHINE = 'bench-lab';
const KEY = `QA_HOST:${MACHINE}`;

function stats(samples: number[]) {
  const sorted = ascending(samples);
  const at = (q: number) => quantile(sorted, q, 2);
  return {
    n: sorted.length,
    p50: at(0.5),
    p95: at(0.95),
    p99: at(0.99),
    mean: Math.round((sorted.reduce((a, b) => a + b, 0) / sorted.length) * 100) / 100,
  };
}

const ms = (from: bigint) => Number(process.hrtime.bigint() - from) / 1e6;

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const home = yokeHome();
  mkdirSync(home, { recursive: true }); // a clean checkout has no .yoke/ yet: the dev server's log goes there
  await withBenchDatabase(
    'handoff',
    async ({ db, postgres }) => {
      let serverPid: number | undefined;
      let address = process.env.TEMPORAL_ADDRESS;
      if (!address) {
        const started = await startDevServerOnFreePort({
          cli: findTemporalCli(),
          logFile: join(home, 'bench-temporal.log'),
        });
        serverPid = started.pid;
        address = `127.0.0.1:${started.port}`;
      }
      const connection = await Connection.connect({ address });
      const nativeConnection = await NativeConnection.connect({ address });
      try {
        const client = new Client({ connection });
        const taskQueue = `bench-handoff-${process.pid}`;
        const notifier = temporalLineNotifier(client, taskQueue);
        const worker = await Worker.create({
          connection: nativeConnection,
          taskQueue,
          workflowBundle: await bundleWorkflowCode({
            workflowsPath: require.resolve('../workflows'),
            logger: new DefaultLogger('WARN'),
          }),
          activities: createActivities({ db, temporal: { client, taskQueue } }),
        });
        const running = worker.run();

        await projectActivities({ db }).createProject({ name: 'bench' });
        // C3: a QA host hold names a registered machine
        await registerBenchMachines(db, [MACHINE]);
        const sessions = sessionActivities({ db });
        const claims = claimActivities({ db, line: { notifier } });
        for (let i = 0; i <= HANDOFFS + 1; i++)
          await sessions.registerSession({ sessionId: `s${i}`, actorId: `a${i}`, project: 'bench' });

        // Hand-offs: the next waiter is in line with its awaitTurn update pending when the holder releases.
        let holder = await claims.acquireCoordinationClaim({ sessionId: 's0', key: KEY });
        const handOff = async (i: number): Promise<number> => {
          const sessionId = `s${i}`;
          try {
            await claims.acquireCoordinationClaim({
              sessionId,
              key: KEY,
              join: { resumeCommand: `yoke coordination-claim acquire --key ${KEY}` },
            });
            throw new Error('the waiter was not refused');
          } catch (err) {
            if (!(err instanceof YokeError)) throw err;
          }
          const wait = client.workflow.getHandle(waitWorkflowId(MACHINE, sessionId));
          const woken = wait.executeUpdate(awaitTurn);
          const started = process.hrtime.bigint();
          await claims.releaseWorkClaim({
            actingSessionId: holder.claim.session_id,
            claimId: holder.claim.claim_id,
            reason: 'bench',
          });
          const turn = await woken;
          if (turn.state !== 'reserved') throw new Error(`waiter ${sessionId} woke as ${turn.state}`);
          holder = await claims.acquireCoordinationClaim({ sessionId, key: KEY });
          const took = ms(started);
          await wait.signal(turnConsumed);
          return took;
        };

        // Baseline: the same workflow and update, woken by a bare signal with no Postgres work.
        const future = new Date(Date.now() + 3_600_000).toISOString();
        const bareSignal = async (i: number): Promise<number> => {
          const handle = await client.workflow.start('testMachineWait', {
            workflowId: waitWorkflowId('bench-baseline', `b${i}`),
            taskQueue,
            args: [{ testMachine: 'bench-baseline', sessionId: `b${i}` }],
          });
          const woken = handle.executeUpdate(awaitTurn);
          const started = process.hrtime.bigint();
          await handle.signal(hostReserved, { claimId: i, reservedUntil: future });
          await woken;
          const took = ms(started);
          await handle.signal(cancelWait, { reason: 'bench done' });
          return took;
        };

        // Alternating, so a change of the machine's load falls on both alike; the first of each
        // warms the worker, the connections and the prepared statements and is not counted.
        const handoff: number[] = [];
        const signal: number[] = [];
        for (let i = 1; i <= HANDOFFS + 1; i++) {
          const h = await handOff(i);
          const b = await bareSignal(i);
          if (i === 1) continue;
          handoff.push(h);
          signal.push(b);
        }

        worker.shutdown();
        await running;
        const h = stats(handoff);
        const b = stats(signal);
        console.log(
          JSON.stringify(
            {
              benchmark: 'handoff',
              handoffs: HANDOFFS,
              temporal: serverPid ? 'dev server started by the bench' : address,
              postgres,
              release_to_next_holder_ms: h,
              bare_signal_round_trip_ms: b,
              ratio: {
                p50: Math.round((h.p50 / b.p50) * 100) / 100,
                p95: Math.round((h.p95 / b.p95) * 100) / 100,
                p99: Math.round((h.p99 / b.p99) * 100) / 100,
              },
            },
            null,
            2,
          ),
        );
      } finally {
        await connection.close();
        await nativeConnection.close();
        if (serverPid) process.kill(-serverPid, 'SIGTERM');
      }
    },
    4,
  );
}

runBench(main);
