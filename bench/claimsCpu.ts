import { readFileSync, writeFileSync } from 'node:fs';
import { sql } from 'kysely';
import { claimActivities } from '../activities/claims';
import { projectActivities } from '../activities/projects';
import { sessionActivities } from '../activities/sessions';
import { registerBenchMachines, withBenchDatabase } from './benchDatabase';
import { runBench } from './benchMain';

/**
 * CPU per claim pair, one client on one connection: yoke's acquire+release and the bare
 * INSERT ... ON CONFLICT / UPDATE pair, alternated in blocks. On a shared machine wall-clock
 * ratios move with the neighbours' load; the CPU each side spends (the backend's from
 * /proc/<pid>/schedstat, the client's from process.cpuUsage) moves much less.
 */
const PAIRS = Number(process.env.BENCH_PAIRS ?? 300);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 8);

const onCpuNs = (pid: number) => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);

async function main(): Promise<void> {
  await withBenchDatabase(
    'claimscpu',
    async ({ db }) => {
      await projectActivities({ db }).createProject({ name: 'bench' });
      await sessionActivities({ db }).registerSession({ sessionId: 'bench-0', actorId: 'bench-0', project: 'bench' });
      const claims = claimActivities({ db });
      const n = PAIRS * ROUNDS + 100;
      await registerBenchMachines(db, ['hot', ...Array.from({ length: n }, (_, i) => `d${i}`)]);
      await sql`CREATE TABLE plain_claims (LIKE work_claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)`.execute(
        db,
      );
      await sql`CREATE UNIQUE INDEX plain_live ON plain_claims ((scope->>'test_machine')) WHERE released_at IS NULL`.execute(
        db,
      );
      await sql`ALTER TABLE plain_claims ADD PRIMARY KEY (claim_id)`.execute(db);
      const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
      const pid = rows[0]!.pid;
      if (process.env.BENCH_PID_FILE) writeFileSync(process.env.BENCH_PID_FILE, String(pid));

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
      const cases = [
        { name: 'yoke_hot', pair: yoke, key: () => 'hot' },
        { name: 'plain_hot', pair: plain, key: () => 'hot' },
        { name: 'yoke_distinct', pair: yoke, key: (i: number) => `d${i}` },
        { name: 'plain_distinct', pair: plain, key: (i: number) => `d${i}` },
      ]
        .filter((c) => !process.env.BENCH_ONLY || process.env.BENCH_ONLY.split(',').includes(c.name))
        .map((c) => ({ ...c, backend: 0, client: 0, wall: 0, done: 0 }));
      for (const c of cases) for (let i = 0; i < 30; i++) await c.pair(c.key(n - 1 - i));
      let next = 0;
      for (let r = 0; r < ROUNDS; r++) {
        const from = next;
        for (const c of cases) {
          const b0 = onCpuNs(pid);
          const c0 = process.cpuUsage();
          const w0 = process.hrtime.bigint();
          for (let i = from; i < from + PAIRS; i++) await c.pair(c.key(i));
          const w = Number(process.hrtime.bigint() - w0) / 1e6;
          const cu = process.cpuUsage(c0);
          c.backend += (onCpuNs(pid) - b0) / 1e6;
          c.client += (cu.user + cu.system) / 1e3;
          c.wall += w;
          c.done += PAIRS;
        }
        next += PAIRS;
      }
      const per = (c: (typeof cases)[number]) => ({
        backend_ms: +(c.backend / c.done).toFixed(4),
        client_ms: +(c.client / c.done).toFixed(4),
        cpu_ms: +((c.backend + c.client) / c.done).toFixed(4),
        wall_ms: +(c.wall / c.done).toFixed(4),
      });
      const out: Record<string, unknown> = {};
      for (const c of cases) out[c.name] = per(c);
      for (const k of ['hot', 'distinct']) {
        const yc = cases.find((c) => c.name === `yoke_${k}`);
        const pc = cases.find((c) => c.name === `plain_${k}`);
        if (!yc || !pc) continue;
        const y = per(yc);
        const p = per(pc);
        out[`ratio_${k}`] = {
          backend: +(p.backend_ms / y.backend_ms).toFixed(3),
          client: +(p.client_ms / y.client_ms).toFixed(3),
          cpu: +(p.cpu_ms / y.cpu_ms).toFixed(3),
          wall: +(p.wall_ms / y.wall_ms).toFixed(3),
        };
      }
      console.log(JSON.stringify(out));
    },
    1,
  );
}

runBench(main);
