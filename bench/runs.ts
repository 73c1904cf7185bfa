import { sql } from 'kysely';
import { deploymentRunActivities } from '../activities/deploymentRuns';
import { withBenchDatabase } from './benchDatabase';
import { applyBenchProject } from './benchProject';
import { CountingPlugin } from './countingPlugin';
import { ascending, quantile } from './stats';
import { runBench } from './benchMain';

/**
 * Deployment-run throughput: creates per second, and the latency of `execute` (advisory
 * lock per origin, occupancy check, freeze, status change) with 1, 10 and 100 origins held
 * by other executing runs, next to a bare advisory-lock transaction on the same server (one
 * after each execute), and the statements one execute sends (BEGIN and COMMIT not counted).
 * Prints one JSON object.
 */
const CREATES = Number(process.env.BENCH_CREATES ?? 300);
const EXECUTES = Number(process.env.BENCH_EXECUTES ?? 100);
const OCCUPIED = [1, 10, 100];

function stats(samples: number[]) {
  const sorted = ascending(samples);
  const at = (q: number) => quantile(sorted, q);
  return { n: sorted.length, p50_ms: at(0.5), p95_ms: at(0.95), p99_ms: at(0.99) };
}

const since = (t: bigint) => Number(process.hrtime.bigint() - t) / 1e6;

async function main(): Promise<void> {
  await withBenchDatabase('runs', async ({ db, postgres }) => {
    const max = Math.max(...OCCUPIED);
    const envs = [...Array.from({ length: max }, (_, i) => `held-${i}`), 'free'];
    const definition = {
      project: 'bench',
      item_prefix: 'B',
      environments: envs.map((e) => ({ name: e, url: `http://${e}.bench.test`, tier: 'stage' })),
      flows: envs.map((e) => ({ name: e, stages: [{ name: 'go', kind: 'auto', target: e }] })),
      items: [{ id: 'B-1', obligations: [{ case: 'smoke', qa_phase: 'post_deploy', target_env: 'free' }] }],
    };
    await applyBenchProject(db, definition);
    const runs = deploymentRunActivities({ db });
    const counter = new CountingPlugin();
    const counted = deploymentRunActivities({ db: db.withPlugin(counter) });
    const create = (flow: string, key: string, items: string[] = []) =>
      runs.createRun({
        sessionId: 'bench',
        project: 'bench',
        flow,
        target: flow,
        candidate: 'abcdef1234',
        idempotencyKey: key,
        items,
      });

    // creates per second, with and without a member
    let started = process.hrtime.bigint();
    for (let i = 0; i < CREATES; i++) await create('free', `c-${i}`);
    const createsEmpty = Math.round(CREATES / (since(started) / 1000));
    started = process.hrtime.bigint();
    for (let i = 0; i < CREATES; i++) await create('free', `m-${i}`, ['B-1']);
    const createsMember = Math.round(CREATES / (since(started) / 1000));

    // The baseline: a bare transaction taking one advisory lock and updating one row, timed
    // right after each execute, so a change of the machine's load falls on both alike.
    await sql`CREATE TABLE bare (id int PRIMARY KEY, n int)`.execute(db);
    await sql`INSERT INTO bare VALUES (1, 0)`.execute(db);
    const bare: Record<string, number[]> = {};
    const bareTransaction = async (phase: string) => {
      const t = process.hrtime.bigint();
      await db.transaction().execute(async (trx) => {
        await sql`SELECT pg_advisory_xact_lock(hashtextextended('occupancy:http://free.bench.test', 0))`.execute(trx);
        await sql`UPDATE bare SET n = n + 1 WHERE id = 1`.execute(trx);
      });
      (bare[phase] ??= []).push(since(t));
    };

    // execute latency with N origins held by other executing runs
    const execute: Record<string, ReturnType<typeof stats>> = {};
    const statements: Record<string, number> = {};
    let held = 0;
    for (const n of OCCUPIED) {
      for (; held < n; held++)
        await runs.executeRun({ sessionId: 'bench', runId: (await create(`held-${held}`, `h-${held}`)).run_id });
      const samples: number[] = [];
      for (let i = 0; i < EXECUTES; i++) {
        const run = await create('free', `x-${n}-${i}`, ['B-1']);
        const before = counter.count;
        const t = process.hrtime.bigint();
        await counted.executeRun({ sessionId: 'bench', runId: run.run_id });
        samples.push(since(t));
        statements[`occupied_${n}`] = counter.count - before;
        await runs.terminalizeRun({ sessionId: 'bench', runId: run.run_id, disposition: 'cancelled', reason: 'bench' });
        await bareTransaction(`occupied_${n}`);
      }
      execute[`occupied_${n}`] = stats(samples);
    }
    const baseline = stats(Object.values(bare).flat());
    console.log(
      JSON.stringify(
        {
          benchmark: 'runs',
          postgres,
          creates_per_s: { without_members: createsEmpty, with_one_member: createsMember },
          execute_latency: execute,
          statements_per_execute: statements,
          bare_advisory_lock_transaction: baseline,
          // Each against the bare transactions timed alongside it.
          bare_p50_ms_alongside: Object.fromEntries(Object.entries(bare).map(([k, v]) => [k, stats(v).p50_ms])),
          execute_p50_over_bare_p50: Object.fromEntries(
            Object.entries(execute).map(([k, v]) => [k, Math.round((v.p50_ms / stats(bare[k]!).p50_ms) * 10) / 10]),
          ),
        },
        null,
        2,
      ),
    );
  });
}

runBench(main);
