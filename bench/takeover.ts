import { execFileSync } from 'node:child_process';
import { sql } from 'kysely';
import { deploymentRunActivities } from '../activities/deploymentRuns';
import { insertExecution } from '../db/qaExecutions';
import { withBenchDatabase } from './benchDatabase';
import { scratchRepository } from './gitRepository';
import { applyBenchProject, fleetItems, qaFleetDefinition } from './benchProject';
import { ascending, quantile } from './stats';
import { runBench } from './benchMain';

/**
 * Takeover (T2) latency with 1, 10 and 100 moved members, each with a live QA plan execution:
 * containment read from a real git repository (prepared outside the locks) and the one move
 * transaction, along a chain (each successor executes, waits at QA and is taken over in turn).
 * Baselines in the same run: the bare `git merge-base --is-ancestor` call and a bare
 * transaction that re-points the same rows with one UPDATE per table.
 */
const SIZES = [1, 10, 100];
const REPS = Number(process.env.BENCH_TAKEOVERS ?? 10);

function stats(samples: number[]) {
  const sorted = ascending(samples);
  const at = (q: number) => quantile(sorted, q);
  return { n: sorted.length, p50_ms: at(0.5), p95_ms: at(0.95), max_ms: at(1) };
}

const since = (t: bigint) => Number(process.hrtime.bigint() - t) / 1e6;

/** A repository with commits A -> C: every successor (at C) contains the first run (at A) and itself. */
function repository(): { dir: string; A: string; C: string } {
  const { dir, commit } = scratchRepository('yoke-bench-repo-', { name: 'b', email: 'b@b' });
  return { dir, A: commit('f', 'A', 'A'), C: commit('f', 'C', 'C') };
}

async function main(): Promise<void> {
  const repo = repository();
  await withBenchDatabase('takeover', async ({ db, postgres }) => {
    await applyBenchProject(db, qaFleetDefinition(SIZES, { deploy: 'first', repository: repo.dir }));
    const runs = deploymentRunActivities({ db });
    let key = 0;
    const create = async (n: number, candidate: string, items: string[]) =>
      (
        await runs.createRun({
          sessionId: 'bench',
          project: 'bench',
          flow: `flow-${n}`,
          target: `env-${n}`,
          candidate,
          idempotencyKey: `k-${++key}`,
          items,
        })
      ).run_id;
    /** Executes the run and walks it to its item QA stage, where it waits. */
    const toQa = async (runId: string) => {
      const { walk } = await runs.executeRun({ sessionId: 'bench', runId });
      await runs.beginStage({ runId, ordinal: 0, walk });
      await runs.finishStage({ runId, ordinal: 0, walk, result: { ok: true, detail: 'bench' } });
      await runs.beginStage({ runId, ordinal: 1, walk });
    };

    const figures: Record<string, unknown>[] = [];
    for (const n of SIZES) {
      const items = fleetItems(SIZES, n);
      let pred = await create(n, repo.A, items);
      await toQa(pred);
      const members = await db
        .selectFrom('deployment_run_items')
        .select('item_id')
        .where('run_id', '=', pred)
        .execute();
      const plan = { id: 'accept', cases: [{ name: 'look', manual: { instructions: 'look' } }] };
      for (const m of members)
        await insertExecution(db, {
          run_id: pred,
          stage_name: 'item-qa',
          plan_id: 'accept',
          item_id: m.item_id,
          plan,
          session_id: 'bench',
          target_environment: `env-${n}`,
          target_url: null,
          served_revision_path: '/revision',
          delivered_commit: repo.A,
          observed_commit: null,
          revision_check: 'unverified',
          revision_detail: null,
        });
      const total: number[] = [];
      const prepare: number[] = [];
      const commit: number[] = [];
      let moved = { members: 0, executions: 0, qa: 0 };
      for (let i = 0; i < REPS; i++) {
        const succ = await create(n, repo.C, []);
        const t0 = process.hrtime.bigint();
        const prepared = await runs.prepareTakeover({ predecessorRunId: pred, successorRunId: succ });
        const t1 = process.hrtime.bigint();
        const receipt = await runs.commitTakeover(prepared, 'bench');
        commit.push(since(t1));
        prepare.push(Number(t1 - t0) / 1e6);
        total.push(since(t0));
        moved = {
          members: receipt.moved_members.length,
          executions: receipt.moved_executions.length,
          qa: receipt.moved_qa.length,
        };
        await toQa(succ);
        pred = succ;
      }
      const git: number[] = [];
      for (let i = 0; i < REPS; i++) {
        const t = process.hrtime.bigint();
        execFileSync('git', ['-C', repo.dir, 'merge-base', '--is-ancestor', repo.A, repo.C]);
        git.push(since(t));
      }
      const bare: number[] = [];
      for (let i = 0; i < REPS; i++) {
        const t = process.hrtime.bigint();
        await db.transaction().execute(async (trx) => {
          await sql`UPDATE deployment_run_items SET run_id = run_id WHERE run_id = ${pred}`.execute(trx);
          await sql`UPDATE deployment_run_qa SET run_id = run_id WHERE run_id = ${pred}`.execute(trx);
          await sql`UPDATE qa_plan_executions SET run_id = run_id WHERE run_id = ${pred}`.execute(trx);
        });
        bare.push(since(t));
      }
      figures.push({
        moved_members: moved.members,
        moved_executions: moved.executions,
        moved_qa_rows: moved.qa,
        takeover: stats(total),
        prepare_containment: stats(prepare),
        commit_transaction: stats(commit),
        baseline_git_is_ancestor: stats(git),
        baseline_bare_move_transaction: stats(bare),
      });
    }
    process.stdout.write(
      `${JSON.stringify({ bench: 'takeover', postgres, takeovers_per_size: REPS, figures }, null, 2)}\n`,
    );
  });
}

runBench(main);
