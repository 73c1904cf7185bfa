import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sessionActivities } from '../activities/sessions';
import { projectRoot } from '../config/yokeConfig';
import { withBenchDatabase } from './benchDatabase';
import { ascending, machine, quantile } from './stats';
import { runBench } from './benchMain';

/**
 * The status-line hook (issue 16: within 1.3x of a bare node start): a cold `yoke hooks
 * status-line` process fed a real Claude status-line payload, which attests the served model
 * and window and reads the session's totals from Postgres, against a bare `node -e 0`, the two
 * started in turn (pairs, so a drift of the machine's speed hits both). Prints one JSON object.
 */
const RUNS = Number(process.env.BENCH_STATUS_LINE_RUNS ?? 30);
const WARMUP = 3;

const payload = JSON.stringify({
  session_id: 'bench-status-line',
  transcript_path: '/tmp/bench-status-line.jsonl',
  cwd: '/w',
  model: { id: 'claude-opus-4-6[1m]', display_name: 'Opus 4.6' },
  workspace: { current_dir: '/w', project_dir: '/w' },
  version: '2.1.0',
  output_style: { name: 'default' },
  cost: { total_cost_usd: 0.5, total_duration_ms: 1000, total_api_duration_ms: 800 },
  context_window: {
    context_window_size: 1_000_000,
    total_input_tokens: 12_000,
    total_output_tokens: 3_000,
    current_usage: null,
  },
});

function timed(args: string[], input: string | undefined, env: NodeJS.ProcessEnv): { ms: number; stdout: string } {
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, args, { input, env, encoding: 'utf8' });
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { ms, stdout: r.stdout };
}

async function main(): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'yoke-bench-status-line-'));
  try {
    await withBenchDatabase('status_line', async ({ db, url }) => {
      await sessionActivities({ db }).registerSession({
        sessionId: 'bench-status-line',
        actorId: 'bench',
        harness: 'claude',
        machine: 'bench-machine',
      });
      const env = { ...process.env, DATABASE_URL: url, YOKE_HOME: home };
      // BENCH_STATUS_LINE_BIN: another build's bin/yoke (an earlier commit's, to compare in one sitting)
      const hook = [process.env.BENCH_STATUS_LINE_BIN || join(projectRoot(), 'bin', 'yoke'), 'hooks', 'status-line'];
      const bare: number[] = [];
      const line: number[] = [];
      const pairs: number[] = [];
      let shown = '';
      for (let i = 0; i < WARMUP + RUNS; i++) {
        const b = timed(['-e', '0'], undefined, env).ms;
        const s = timed(hook, payload, env);
        shown = s.stdout.trim();
        if (i < WARMUP) continue;
        bare.push(b);
        line.push(s.ms);
        pairs.push(s.ms / b);
      }
      const attested = await db
        .selectFrom('sessions')
        .select(['served_model', 'served_window'])
        .where('session_id', '=', 'bench-status-line')
        .executeTakeFirstOrThrow();
      const [b, s, p] = [ascending(bare), ascending(line), ascending(pairs)];
      console.log(
        JSON.stringify(
          {
            benchmark: 'status-line',
            runs: RUNS,
            printed: shown,
            attested: { model: attested.served_model, window: attested.served_window },
            bare_node_ms: { p50: quantile(b, 0.5, 1), p90: quantile(b, 0.9, 1) },
            status_line_ms: { p50: quantile(s, 0.5, 1), p90: quantile(s, 0.9, 1) },
            // issue 16's target, from the figures above
            targets: {
              status_line_vs_bare_node: {
                ratio_of_p50: Math.round((quantile(s, 0.5, 3) / quantile(b, 0.5, 3)) * 100) / 100,
                pairwise_p50: quantile(p, 0.5, 2),
                at_most: 1.3,
              },
            },
            machine: machine(),
          },
          null,
          2,
        ),
      );
    });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

runBench(main);
