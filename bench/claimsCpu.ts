import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { claimActivities } from '../activities/claims';
import { projectActivities } from '../activities/projects';
import { sessionActivities } from '../activities/sessions';
import { registerBenchMachines, withBenchDatabase } from './benchDatabase';
import { runBench } from './benchMain';
import { machine as hostMachine } from './stats';

/**
 * CPU per claim pair, one client on one connection: yoke's acquire+release next to the bare
 * INSERT ... ON CONFLICT / UPDATE pair of bench/claims.ts, alternated in blocks, on one hot key
 * and on distinct keys. On a shared machine the pairs' wall time follows the neighbours' load
 * (commit flushes above all); the CPU each side spends moves much less: the backend's is read
 * from /proc/<pid>/schedstat (so Postgres must run on this machine), the client's from
 * process.cpuUsage. Each ratio is the median over blocks of bare / yoke, as in bench:claims
 * (1.0 = as cheap as the bare pair). Prints one JSON object.
 */
const PAIRS = Number(process.env.BENCH_PAIRS ?? 200);
const BLOCKS = Number(process.env.BENCH_BLOCKS ?? 12);

const onCpuMs = (pid: number) => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const round = (x: number, digits = 3) => Number(x.toFixed(digits));

interface Case {
  name: string;
  pair: (machine: string) => Promise<void>;
  key: (i: number) => string;
  backend: number[];
  client: number[];
  wall: number[];
}

async function main(): Promise<void> {
  await withBenchDatabase(
    'claimscpu',
    async ({ db, postgres }) => {
      await projectActivities({ db }).createProject({ name: 'bench' });
      await sessionActivities({ db }).registerSession({ sessionId: 'bench-0', actorId: 'bench-0', project: 'bench' });
      const claims = claimActivities({ db });
      const machines = PAIRS * BLOCKS + 50;
      await registerBenchMachines(db, ['hot', ...Array.from({ length: machines }, (_, i) => `d${i}`)]);
      await sql`CREATE TABLE plain_claims (LIKE work_claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)`.execute(
        db,
      );
      await sql`CREATE UNIQUE INDEX plain_live ON plain_claims ((scope->>'test_machine')) WHERE released_at IS NULL`.execute(
        db,
      );
      await sql`ALTER TABLE plain_claims ADD PRIMARY KEY (claim_id)`.execute(db);
      // One connection: the pool's only backend runs both sides.
      const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
      const pid = rows[0]!.pid;

      const yoke = async (machine: string) => {
        const { claim } = await claims.acquireCoordinationClaim({ sessionId: 'bench-0', key: `QA_HOST:${machine}` });
        await claims.releaseWorkClaim({ actingSessionId: 'bench-0', claimId: claim.claim_id, reason: 'bench' });
      };
      const plain = async (machine: string) => {
        const inserted = await sql<{ claim_id: number }>`
          INSERT INTO plain_claims (target_kind, scope, key, session_id)
          VALUES ('qa_admission', ${JSON.stringify({ test_machine: machine })}::jsonb, ${machine}, 'bench-0')
          ON CONFLICT DO NOTHING RETURNING claim_id`.execute(db);
        await sql`UPDATE plain_claims SET released_at = now(), release_reason = 'bench' WHERE claim_id = ${inserted.rows[0]!.claim_id}`.execute(
          db,
        );
      };
      const hot = () => 'hot';
      const distinct = (i: number) => `d${i}`;
      const cases: Case[] = [
        { name: 'yoke_hot', pair: yoke, key: hot },
        { name: 'plain_hot', pair: plain, key: hot },
        { name: 'yoke_distinct', pair: yoke, key: distinct },
        { name: 'plain_distinct', pair: plain, key: distinct },
      ].map((c) => ({ ...c, backend: [], client: [], wall: [] }));
      for (const c of cases) for (let i = 0; i < 30; i++) await c.pair(c.key(machines - 1 - i)); // warm plans and caches
      for (let b = 0; b < BLOCKS; b++) {
        for (const c of cases) {
          const backend = onCpuMs(pid);
          const client = process.cpuUsage();
          const started = process.hrtime.bigint();
          for (let i = b * PAIRS; i < (b + 1) * PAIRS; i++) await c.pair(c.key(i));
          c.wall.push(Number(process.hrtime.bigint() - started) / 1e6 / PAIRS);
          const used = process.cpuUsage(client);
          c.backend.push((onCpuMs(pid) - backend) / PAIRS);
          c.client.push((used.user + used.system) / 1e3 / PAIRS);
        }
      }
      const figures = (c: Case) => ({
        backend_cpu_ms: round(median(c.backend)),
        client_cpu_ms: round(median(c.client)),
        wall_ms: round(median(c.wall)),
      });
      const ratios = (yokeCase: Case, plainCase: Case) => {
        const each = (of: (c: Case, b: number) => number) =>
          round(median(yokeCase.backend.map((_, b) => of(plainCase, b) / of(yokeCase, b))), 2);
        return {
          cpu: each((c, b) => c.backend[b]! + c.client[b]!),
          backend_cpu: each((c, b) => c.backend[b]!),
          client_cpu: each((c, b) => c.client[b]!),
          wall: each((c, b) => c.wall[b]!),
        };
      };
      const [yokeHot, plainHot, yokeDistinct, plainDistinct] = cases as [Case, Case, Case, Case];
      console.log(
        JSON.stringify(
          {
            benchmark: 'claims_cpu',
            pairs_per_block: PAIRS,
            blocks: BLOCKS,
            postgres,
            machine: hostMachine(),
            connections: 1,
            per_pair_medians: Object.fromEntries(cases.map((c) => [c.name, figures(c)])),
            ratio_plain_to_yoke: {
              hot_key: ratios(yokeHot, plainHot),
              distinct_keys: ratios(yokeDistinct, plainDistinct),
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

runBench(main);
