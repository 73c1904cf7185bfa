import { sql } from 'kysely';
import { claimActivities } from '../activities/claims';
import { projectActivities } from '../activities/projects';
import { sessionActivities } from '../activities/sessions';
import { YokeError } from '../domain/errors';
import { CountingPlugin } from './countingPlugin';
import { registerBenchMachines, withBenchDatabase } from './benchDatabase';
import { runBench } from './benchMain';
import { machine as hostMachine } from './stats';

/**
 * Claims throughput: acquire+release pairs per second through yoke (session check, unique
 * partial index, holder view, release transaction) next to two floors reached on the same server
 * in the same run by a bare single-row INSERT ... ON CONFLICT DO NOTHING / UPDATE loop: on a table
 * of work_claims' columns with one live index (the plain pair, the issue's target), and on a
 * table of work_claims' own shape, its indexes and foreign keys (what the schema alone costs).
 * With one client and with four concurrent clients, on one hot key and on distinct keys. On the
 * hot key with four clients a refused acquire (the key is held) is tried again until it takes
 * the key, on every side. Every case runs in blocks interleaved with the others, so a change in
 * the machine's load falls on all of them alike. Prints one JSON object.
 */
const PAIRS = Number(process.env.BENCH_PAIRS ?? 2000);
const CLIENTS = 4;
const BLOCKS = 10;

type Pair = (client: number, i: number) => Promise<void>;

interface Case {
  name: string;
  clients: number;
  pair: Pair;
  seconds: number;
  done: number;
}

async function block(c: Case, from: number, n: number): Promise<void> {
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: c.clients }, async (_, client) => {
      for (let i = from + client; i < from + n; i += c.clients) await c.pair(client, i);
    }),
  );
  c.seconds += Number(process.hrtime.bigint() - started) / 1e9;
  c.done += n;
}

async function main(): Promise<void> {
  await withBenchDatabase(
    'claims',
    async ({ db, postgres }) => {
      await projectActivities({ db }).createProject({ name: 'bench' });
      const sessions = sessionActivities({ db });
      for (let c = 0; c < CLIENTS; c++)
        await sessions.registerSession({ sessionId: `bench-${c}`, actorId: `bench-${c}`, project: 'bench' });
      const counter = new CountingPlugin();
      const claims = claimActivities({ db: db.withPlugin(counter) });
      // C3: QA host holds name registered machines (distinct keys: one per pair and case)
      const distinct = (tag: string, i: number) => `${tag}${i}`;
      await registerBenchMachines(db, [
        'hot',
        ...['d1-', 'd4-', 'w-'].flatMap((tag) => Array.from({ length: PAIRS + 50 }, (_, i) => distinct(tag, i))),
      ]);

      const yokePair =
        (machine: (i: number) => string): Pair =>
        async (client, i) => {
          const sessionId = `bench-${client}`;
          for (;;) {
            try {
              const { claim } = await claims.acquireCoordinationClaim({ sessionId, key: `QA_HOST:${machine(i)}` });
              await claims.releaseWorkClaim({ actingSessionId: sessionId, claimId: claim.claim_id, reason: 'bench' });
              return;
            } catch (err) {
              if (!(err instanceof YokeError) || err.code !== 'claim_held') throw err;
            }
          }
        };

      await sql`CREATE TABLE plain_claims (LIKE work_claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)`.execute(
        db,
      );
      await sql`CREATE UNIQUE INDEX plain_live ON plain_claims ((scope->>'test_machine')) WHERE released_at IS NULL`.execute(
        db,
      );
      // The bare release finds its row by key, as yoke's does; without it the UPDATE scans every
      // row the run has written and the floor sinks as the bench goes on.
      await sql`ALTER TABLE plain_claims ADD PRIMARY KEY (claim_id)`.execute(db);
      /**
       * A bare pair on either floor's table: `take` inserts the claim (no id when another client
       * holds the key: try again, as yoke's side does), `release` updates it by key.
       */
      const barePair =
        (
          take: (key: string, session: string) => Promise<number | undefined>,
          release: (id: number, session: string) => Promise<unknown>,
        ) =>
        (machine: (i: number) => string): Pair =>
        async (client, i) => {
          const session = `bench-${client}`;
          let id = await take(machine(i), session);
          while (id === undefined) id = await take(machine(i), session);
          await release(id, session);
        };
      const plainPair = barePair(
        async (key, session) =>
          (
            await sql<{ claim_id: number }>`
              INSERT INTO plain_claims (target_kind, scope, key, session_id)
              VALUES ('qa_admission', ${JSON.stringify({ test_machine: key })}::jsonb, ${key}, ${session})
              ON CONFLICT DO NOTHING RETURNING claim_id`.execute(db)
          ).rows[0]?.claim_id,
        (id) =>
          sql`UPDATE plain_claims SET released_at = now(), release_reason = 'bench' WHERE claim_id = ${id}`.execute(db),
      );

      // A second floor: the same bare pair on a table of work_claims' own shape (its indexes, its
      // foreign keys to sessions and projects, the release's columns written), so the figures
      // tell what the schema costs apart from what yoke's statements add to it.
      await sql`CREATE TABLE schema_claims (LIKE work_claims INCLUDING ALL)`.execute(db);
      await sql`ALTER TABLE schema_claims ADD FOREIGN KEY (session_id) REFERENCES sessions,
                  ADD FOREIGN KEY (released_by_session_id) REFERENCES sessions,
                  ADD FOREIGN KEY (project_id) REFERENCES projects`.execute(db);
      const project = (
        await sql<{ id: number }>`SELECT project_id AS id FROM projects WHERE name = 'bench'`.execute(db)
      ).rows[0]!.id;
      const schemaPair = barePair(
        async (key, session) =>
          (
            await sql<{ claim_id: number }>`
              INSERT INTO schema_claims (target_kind, scope, key, project_id, session_id)
              VALUES ('qa_admission', ${JSON.stringify({ test_machine: key })}::jsonb, ${`QA_HOST:${key}`}, ${project}, ${session})
              ON CONFLICT DO NOTHING RETURNING claim_id`.execute(db)
          ).rows[0]?.claim_id,
        (id, session) =>
          sql`UPDATE schema_claims SET released_at = now(), release_reason = 'bench',
                     released_by_session_id = ${session}, released_by_actor_id = ${session}
               WHERE claim_id = ${id}`.execute(db),
      );

      // Statements per pair on the common path, counted before timing (warm-up included).
      counter.count = 0;
      for (let i = 0; i < 50; i++) await yokePair((j) => distinct('w-', j))(0, i);
      const statementsPerPair = counter.count / 50;

      const sides = { yoke: yokePair, plain: plainPair, schema: schemaPair };
      const cases: Case[] = [1, CLIENTS].flatMap((clients) =>
        Object.entries(sides).flatMap(([side, pair]) => [
          { name: `${side}_hot_${clients}`, clients, pair: pair(() => 'hot'), seconds: 0, done: 0 },
          {
            name: `${side}_distinct_${clients}`,
            clients,
            pair: pair((i) => distinct(`d${clients}-`, i)),
            seconds: 0,
            done: 0,
          },
        ]),
      );
      for (const c of cases) for (let i = 0; i < 8; i++) await c.pair(i % c.clients, PAIRS + 42 + i); // warm up pools and plans
      const perBlock = Math.ceil(PAIRS / BLOCKS);
      for (let from = 0; from < PAIRS; from += perBlock)
        for (const c of cases) await block(c, from, Math.min(perBlock, PAIRS - from));

      const rate = (name: string) => {
        const c = cases.find((x) => x.name === name)!;
        return Math.round(c.done / c.seconds);
      };
      const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
      const figures = (clients: number) => {
        const side = (name: keyof typeof sides) => ({
          hot_key_pairs_per_s: rate(`${name}_hot_${clients}`),
          distinct_keys_pairs_per_s: rate(`${name}_distinct_${clients}`),
        });
        type Side = ReturnType<typeof side>;
        const versus = (a: Side, b: Side) => ({
          hot_key: ratio(a.hot_key_pairs_per_s, b.hot_key_pairs_per_s),
          distinct_keys: ratio(a.distinct_keys_pairs_per_s, b.distinct_keys_pairs_per_s),
        });
        const [yoke, plain, schema] = [side('yoke'), side('plain'), side('schema')];
        return {
          connections: clients,
          yoke,
          plain_insert_update: plain,
          ratio_yoke_to_plain: versus(yoke, plain),
          same_schema_insert_update: schema,
          ratio_same_schema_to_plain: versus(schema, plain),
          ratio_yoke_to_same_schema: versus(yoke, schema),
        };
      };
      const { connections: _one, ...one } = figures(1);
      console.log(
        JSON.stringify(
          {
            benchmark: 'claims',
            pairs_per_case: PAIRS,
            postgres,
            machine: hostMachine(),
            connections: 1,
            ...one,
            yoke_statements_per_pair: statementsPerPair,
            four_clients: figures(CLIENTS),
          },
          null,
          2,
        ),
      );
    },
    CLIENTS,
  );
}

runBench(main);
