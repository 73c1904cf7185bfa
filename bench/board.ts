import { sql, type Kysely } from 'kysely';
import type { Database } from '../db/database';
import { readBoard } from '../db/board';
import { toPayload } from '../activities/board';
import { boardMarkdown, renderBoard } from '../domain/board/render';
import { withBenchDatabase } from './benchDatabase';
import { runBench } from './benchMain';

/**
 * The board at size: 1,000 sessions (800 live, 200 ended in the last day) holding 10,000
 * claims of every kind, read with the board's one statement and rendered (payload, Claims
 * column, BOARD.md). The baseline, measured in the same run on the same server, is a bare
 * SELECT of the same claim rows joined to their sessions: the floor of moving the rows.
 */
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 1000);
const CLAIMS_PER_SESSION = 10;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);

async function seed(db: Kysely<Database>): Promise<void> {
  await sql`INSERT INTO projects (name, item_prefix) SELECT 'p' || g, 'P' || g FROM generate_series(1, 5) g`.execute(
    db,
  );
  await sql`INSERT INTO backlog_items (project_id, number)
      SELECT p.project_id, n FROM projects p, generate_series(1, ${SESSIONS}) n`.execute(db);
  await sql`
    INSERT INTO sessions (session_id, actor_id, project_id, machine_id, harness, offered_at, ended_at, end_reason)
      SELECT 's' || i, 'actor' || (i % 37), 1 + i % 5, 'mac-' || (i % 20), 'claude', now() - interval '2 hours',
             CASE WHEN i > ${SESSIONS * 0.8} THEN now() - interval '1 hour' END,
             CASE WHEN i > ${SESSIONS * 0.8} THEN 'session_end' END
        FROM generate_series(1, ${SESSIONS}) i`.execute(db);
  // Ten claims a session: item, epic task, three paths on the item, a process-anchored path,
  // a process, a steering seat or document lock, a test machine and an item-owned migration.
  await sql`
    WITH s AS (
      SELECT i, 's' || i AS session_id, 1 + i % 5 AS project_id, i > ${SESSIONS * 0.8} AS ended,
             (SELECT item_id FROM backlog_items b WHERE b.project_id = 1 + i % 5 AND b.number = i) AS item_id
        FROM generate_series(1, ${SESSIONS}) i
    ), c AS (
      SELECT s.*, j FROM s, generate_series(0, ${CLAIMS_PER_SESSION - 1}) j
    )
    INSERT INTO work_claims (target_kind, scope, key, project_id, item_id, session_id, claimed_at, released_at, release_reason)
    SELECT kind, scope, key, project_id, item, session_id, now() - interval '90 minutes' + j * interval '1 second',
           CASE WHEN ended THEN now() - interval '1 hour' END, CASE WHEN ended THEN 'session_end' END
      FROM (
        SELECT c.*,
          CASE WHEN j = 0 THEN 'item' WHEN j = 1 THEN 'epic_task' WHEN j BETWEEN 2 AND 5 THEN 'path_claim'
               WHEN j = 6 THEN 'process' WHEN j = 7 AND i <= 5 THEN 'steering' WHEN j = 7 THEN 'strategy_doc_claim'
               WHEN j = 8 THEN 'qa_admission' ELSE 'migration_serialization' END AS kind,
          CASE WHEN j = 0 THEN jsonb_build_object('item_id', item_id)
               WHEN j = 1 THEN jsonb_build_object('item_id', item_id, 'task', 'T001')
               WHEN j BETWEEN 2 AND 4 THEN jsonb_build_object('project_id', project_id, 'path', 'src/' || i || '/' || j)
               WHEN j = 5 THEN jsonb_build_object('project_id', project_id, 'path', 'feed/' || i, 'process_key', 'PROC-' || i)
               WHEN j = 6 THEN jsonb_build_object('project_id', project_id, 'process_key', 'PROC-' || i)
               WHEN j = 7 AND i <= 5 THEN jsonb_build_object('project_id', project_id)
               WHEN j = 7 THEN jsonb_build_object('project_id', project_id, 'document', 'DOC-' || i)
               WHEN j = 8 THEN jsonb_build_object('test_machine', 'lab-' || i)
               ELSE jsonb_build_object('project_id', project_id, 'model', 'model-' || i, 'item_id', item_id) END AS scope,
          CASE WHEN j = 8 THEN 'QA_HOST:lab-' || i WHEN j = 9 THEN 'LIVE_DB_MIGRATION:model-' || i END AS key,
          CASE WHEN j IN (0, 1, 2, 3, 4, 9) THEN item_id END AS item
        FROM c) x`.execute(db);
  await sql`ANALYZE`.execute(db);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.floor(s.length / 2)]! * 100) / 100;
}

async function main(): Promise<void> {
  await withBenchDatabase('board', async ({ db, postgres }) => {
    await seed(db);
    let statements = 0;
    const counted = db.withPlugin({
      transformQuery: (args) => {
        statements++;
        return args.node;
      },
      transformResult: async (args) => args.result,
    });
    const read: number[] = [];
    const render: number[] = [];
    const baseline: number[] = [];
    let perRead = 0;
    let rendered = { sessions: 0, claims: 0, keycaps: 0, markdown_bytes: 0 };
    for (let round = -1; round < ROUNDS; round++) {
      const before = statements;
      const t0 = performance.now();
      const rows = await readBoard(counted, { recentLimit: SESSIONS, recentWindowHours: 24 });
      const t1 = performance.now();
      perRead = statements - before;
      const board = renderBoard(toPayload(rows, null));
      const markdown = boardMarkdown(board);
      const t2 = performance.now();
      const b0 = performance.now();
      const plain =
        await sql`SELECT c.*, s.actor_id, s.machine_id FROM work_claims c JOIN sessions s USING (session_id)`.execute(
          db,
        );
      const b1 = performance.now();
      if (round < 0) continue; // warm-up
      read.push(t1 - t0);
      render.push(t2 - t1);
      baseline.push(b1 - b0);
      const all = [...board.active_sessions, ...board.recent_sessions];
      rendered = {
        sessions: all.length,
        claims: rows.claims.length,
        keycaps: all.reduce((n, r) => n + r.claims.length, 0),
        markdown_bytes: Buffer.byteLength(markdown),
      };
      if (plain.rows.length < rows.claims.length) throw new Error('baseline read fewer rows than the board');
    }
    const total = await sql<{ n: number }>`SELECT count(*)::int AS n FROM work_claims`.execute(db);
    console.log(
      JSON.stringify(
        {
          benchmark: 'board',
          postgres,
          rounds: ROUNDS,
          seeded: { sessions: SESSIONS, claims: total.rows[0]!.n },
          rendered,
          statements_per_board_read: perRead,
          board: {
            read_ms_median: median(read),
            render_ms_median: median(render),
            total_ms_median: median(read.map((r, i) => r + render[i]!)),
          },
          baseline_bare_select_claims_ms_median: median(baseline),
          ratio_board_total_to_bare_select:
            Math.round((median(read.map((r, i) => r + render[i]!)) / median(baseline)) * 100) / 100,
        },
        null,
        2,
      ),
    );
  });
}

runBench(main);
