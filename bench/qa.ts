import { sql } from 'kysely';
import { deploymentRunActivities } from '../activities/deploymentRuns';
import { readQaPending } from '../activities/qa/pending';
import { withBenchDatabase } from './benchDatabase';
import { applyBenchProject, fleetItems, qaFleetDefinition } from './benchProject';
import { CountingPlugin } from './countingPlugin';
import { ascending, quantile } from './stats';
import { runBench } from './benchMain';

/**
 * The blocking-QA reader (Q5, `deployment-runs qa-pending`): latency and the number of SQL
 * statements one read issues for runs of 1, 10, 100 and 500 members, next to a bare
 * single-row read on the same server in the same run. The count must not grow with members.
 */
const MEMBERS = [1, 10, 100, 500];
const READS = Number(process.env.BENCH_READS ?? 50);

function stats(samples: number[]) {
  const sorted = ascending(samples);
  const at = (q: number) => quantile(sorted, q);
  return { n: sorted.length, p50_ms: at(0.5), p95_ms: at(0.95) };
}

const since = (t: bigint) => Number(process.hrtime.bigint() - t) / 1e6;

async function main(): Promise<void> {
  await withBenchDatabase('qa', async ({ db, postgres }) => {
    await applyBenchProject(db, qaFleetDefinition(MEMBERS, { deploy: 'last' }));
    const runs = deploymentRunActivities({ db });

    const counter = new CountingPlugin();
    const counted = db.withPlugin(counter);
    const figures: Record<string, unknown>[] = [];
    for (const n of MEMBERS) {
      const run = await runs.createRun({
        sessionId: 'bench',
        project: 'bench',
        flow: `flow-${n}`,
        target: `env-${n}`,
        candidate: 'abcdef1234',
        idempotencyKey: `k-${n}`,
        items: fleetItems(MEMBERS, n),
      });
      await readQaPending(db, { runId: run.run_id }, 30_000); // warm
      counter.count = 0;
      const report = await readQaPending(counted, { runId: run.run_id }, 30_000);
      const statements = counter.count;
      const latency: number[] = [];
      for (let i = 0; i < READS; i++) {
        const t = process.hrtime.bigint();
        await readQaPending(db, { runId: run.run_id }, 30_000);
        latency.push(since(t));
      }
      const baseline: number[] = [];
      for (let i = 0; i < READS; i++) {
        const t = process.hrtime.bigint();
        await sql`SELECT status FROM deployment_runs WHERE run_id = ${run.run_id}`.execute(db);
        baseline.push(since(t));
      }
      figures.push({
        members: n,
        waiting_members_reported: report.members.length,
        run_obligations_reported: report.run_obligations.length,
        statements_per_read: statements,
        qa_pending: stats(latency),
        baseline_single_row_read: stats(baseline),
      });
    }
    const counts = new Set(figures.map((f) => f.statements_per_read));
    process.stdout.write(
      `${JSON.stringify(
        {
          bench: 'qa',
          postgres,
          reads_per_size: READS,
          statement_count_constant: counts.size === 1,
          figures,
        },
        null,
        2,
      )}\n`,
    );
    if (counts.size !== 1) process.exitCode = 1;
  });
}

runBench(main);
