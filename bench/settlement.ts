import { sql } from 'kysely';
import { deploymentRunActivities } from '../activities/deploymentRuns';
import { commitSettlement } from '../activities/settlement/commit';
import { withBenchDatabase } from './benchDatabase';
import { applyBenchProject } from './benchProject';
import { CountingPlugin } from './countingPlugin';
import { runBench } from './benchMain';

/**
 * The commit phase of settlement (S2) for runs of 1, 10, 100 and 500 members: its time and the
 * statements it issues (statements per member is the figure that must stay a small constant;
 * the set-based commit issues the same number whatever the count), next to a bare transaction on the same server
 * doing one UPDATE per member, each in its own savepoint. The ratio of the two times is the
 * cost of the ordinary status write over the bare minimum.
 */
const MEMBERS = [1, 10, 100, 500];
/** Items of the run with n members are numbered after those of the smaller runs; the bare rows after all of them. */
const offset = (n: number) => MEMBERS.filter((m) => m < n).reduce((a, b) => a + b, 0);
const TOTAL = MEMBERS.reduce((a, b) => a + b, 0);

const since = (t: bigint) => Math.round((Number(process.hrtime.bigint() - t) / 1e6) * 1000) / 1000;

async function main(): Promise<void> {
  await withBenchDatabase('settlement', async ({ db, postgres }) => {
    const definition = {
      project: 'bench',
      item_prefix: 'B',
      environments: [{ name: 'stage', url: 'http://stage.bench.test', tier: 'stage' }],
      flows: [
        {
          name: 'release',
          delivery_custody: true,
          completion_flow: true,
          stages: [{ name: 'go', kind: 'auto', target: 'stage' }],
        },
      ],
      // The bare transaction's rows are items of their own, never members of a run.
      items: Array.from({ length: TOTAL * 2 }, (_, i) => ({ id: `B-${i + 1}` })),
    };
    await applyBenchProject(db, definition, { project: 'bench' });
    const runs = deploymentRunActivities({ db, driverFreshMs: 3_600_000 });

    const counter = new CountingPlugin();
    const counted = db.withPlugin(counter);
    const figures: Record<string, unknown>[] = [];
    for (const n of MEMBERS) {
      const members = Array.from({ length: n }, (_, i) => `B-${offset(n) + i + 1}`);
      const run = await runs.createRun({
        sessionId: 'bench',
        project: 'bench',
        flow: 'release',
        target: 'stage',
        candidate: 'abcdef1234',
        idempotencyKey: `k-${n}`,
        items: members,
      });
      await runs.executeRun({ sessionId: 'bench', runId: run.run_id });
      await runs.beginStage({ runId: run.run_id, ordinal: 0, walk: 1 });
      await runs.finishStage({ runId: run.run_id, ordinal: 0, walk: 1, result: { ok: true, detail: 'bench' } });
      await runs.beginSettling({ runId: run.run_id });

      counter.count = 0;
      const t = process.hrtime.bigint();
      const commit = await commitSettlement(counted, run.run_id);
      const commitMs = since(t);
      const statements = counter.count;
      if (commit.closed.length !== n) throw new Error(`run of ${n} closed ${commit.closed.length}`);
      // The rest of the settlement frees the origin for the next run.
      await runs.applyRunSettlementEffects({ runId: run.run_id });
      const finished = await runs.finishSettlement({ runId: run.run_id });
      if (finished.status !== 'succeeded') throw new Error(`run of ${n} is ${finished.status}`);

      // The bare minimum on the same server: one UPDATE per member, each in its own savepoint.
      const bareIds = (
        await db
          .selectFrom('backlog_items')
          .select('item_id')
          .where('number', '>', TOTAL + offset(n))
          .where('number', '<=', TOTAL + offset(n) + n)
          .orderBy('item_id')
          .execute()
      ).map((r) => r.item_id);
      const b = process.hrtime.bigint();
      await db.transaction().execute(async (trx) => {
        for (const [i, id] of bareIds.entries()) {
          await sql.raw(`SAVEPOINT m_${i}`).execute(trx);
          await sql`UPDATE backlog_items SET status = 'done', status_changed_at = clock_timestamp() WHERE item_id = ${id}`.execute(
            trx,
          );
          await sql.raw(`RELEASE SAVEPOINT m_${i}`).execute(trx);
        }
      });
      const bareMs = since(b);
      figures.push({
        members: n,
        commit_phase_ms: commitMs,
        commit_phase_statements: statements,
        statements_per_member: Math.round((statements / n) * 100) / 100,
        bare_savepoint_updates_ms: bareMs,
        bare_statements: n * 3,
        ratio_commit_to_bare: Math.round((commitMs / bareMs) * 100) / 100,
      });
    }
    const at500 = figures.find((f) => f.members === 500)!;
    process.stdout.write(
      `${JSON.stringify(
        {
          bench: 'settlement',
          postgres,
          figures,
          settles_500_members_under_2s: (at500.commit_phase_ms as number) < 2_000,
        },
        null,
        2,
      )}\n`,
    );
  });
}

runBench(main);
