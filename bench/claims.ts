import { sql } from 'kysely';
import { claimActivities } from '../activities/claims';
import { projectActivities } from '../activities/projects';
import { sessionActivities } from '../activities/sessions';
import { registerBenchMachines, withBenchDatabase } from './benchDatabase';

/**
 * Claims throughput: acquire+release pairs per second through yoke (session check, unique
 * partial index, holder view, release transaction) next to the floor a bare single-row
 * INSERT ... ON CONFLICT DO NOTHING / UPDATE loop on a table of the same shape reaches on
 * the same server in the same run. Prints one JSON object.
 */
const PAIRS = Number(process.env.BENCH_PAIRS ?? 2000);

async function timed(fn: (i: number) => Promise<void>, n: number): Promise<number> {
  for (let i = 0; i < Math.min(50, n); i++) await fn(-1 - i); // warm up the pool and plans
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await fn(i);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return Math.round(n / seconds);
}

async function main(): Promise<void> {
  await withBenchDatabase(
    'claims',
    async ({ db, postgres }) => {
      await projectActivities({ db }).createProject({ name: 'bench' });
      await sessionActivities({ db }).registerSession({ sessionId: 'bench', actorId: 'bench', project: 'bench' });
      const claims = claimActivities({ db });
      // C3: QA host holds name registered machines
      await registerBenchMachines(db, ['hot', ...Array.from({ length: PAIRS + 51 }, (_, i) => `m${i - 50}`)]);
      const pair = (key: string) => async () => {
        const { claim } = await claims.acquireCoordinationClaim({ sessionId: 'bench', key });
        await claims.releaseWorkClaim({ actingSessionId: 'bench', claimId: claim.claim_id, reason: 'bench' });
      };
      const yokeHot = await timed(() => pair('QA_HOST:hot')(), PAIRS);
      const yokeDistinct = await timed((i) => pair(`QA_HOST:m${i}`)(), PAIRS);

      await sql`CREATE TABLE plain_claims (LIKE work_claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)`.execute(
        db,
      );
      await sql`CREATE UNIQUE INDEX plain_live ON plain_claims ((scope->>'test_machine')) WHERE released_at IS NULL`.execute(
        db,
      );
      const plainPair = (key: string) => async () => {
        const inserted = await sql<{ claim_id: number }>`
        INSERT INTO plain_claims (target_kind, scope, key, session_id)
        VALUES ('qa_admission', ${JSON.stringify({ test_machine: key })}::jsonb, ${key}, 'bench')
        ON CONFLICT DO NOTHING RETURNING claim_id`.execute(db);
        const id = inserted.rows[0]?.claim_id;
        await sql`UPDATE plain_claims SET released_at = now(), release_reason = 'bench' WHERE claim_id = ${id}`.execute(
          db,
        );
      };
      const plainHot = await timed(() => plainPair('hot')(), PAIRS);
      const plainDistinct = await timed((i) => plainPair(`m${i}`)(), PAIRS);

      const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
      console.log(
        JSON.stringify(
          {
            benchmark: 'claims',
            pairs_per_case: PAIRS,
            postgres,
            connections: 1,
            yoke: { hot_key_pairs_per_s: yokeHot, distinct_keys_pairs_per_s: yokeDistinct },
            plain_insert_update: { hot_key_pairs_per_s: plainHot, distinct_keys_pairs_per_s: plainDistinct },
            ratio_yoke_to_plain: {
              hot_key: ratio(yokeHot, plainHot),
              distinct_keys: ratio(yokeDistinct, plainDistinct),
            },
          },
          null,
          2,
        ),
      );
    },
    1,
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
