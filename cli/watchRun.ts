import type { DeploymentRunActivities } from '../activities/deploymentRuns';
import type { RunView } from '../activities/runs/read';
import type { CommandContext } from './context';

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

function stamp(): string {
  return new Date().toISOString().slice(11, 19);
}

/**
 * `deployment-runs watch`: reads the run from Postgres (the record) and prints each change
 * as it happens: one line per stage transition in a terminal, one JSON object per change
 * with --json. Returns the final status.
 */
export async function watchRun(
  ctx: CommandContext,
  runs: DeploymentRunActivities,
  runId: string,
  opts: { json: boolean; intervalMs: number },
): Promise<string> {
  const seen = new Map<number, string>();
  let lastStatus = '';
  let lastLines = '';
  for (;;) {
    const view = (await runs.getRun({ runId })) as RunView;
    const changes: string[] = [];
    for (const s of view.stages) {
      const key = `${s.status}|${s.detail ?? ''}`;
      if (seen.get(s.ordinal) === key) continue;
      if (!(seen.get(s.ordinal) === undefined && s.status === 'pending')) {
        changes.push(
          `${stamp()}  ${String(s.ordinal + 1).padStart(2)}/${view.stages.length} ${s.name.padEnd(20)} ${s.kind.padEnd(8)} ${s.status}${s.detail && s.status !== 'running' ? `  ${s.detail.split('\n')[0]!.slice(0, 100)}` : ''}`,
        );
      }
      seen.set(s.ordinal, key);
    }
    const lines = view.occupancy.open_lines.join('; ');
    // S1: a settling run is still executing; watch shows the phase, and ends only at a terminal status.
    const status = view.settling ? 'settling' : view.status;
    if (status !== lastStatus || changes.length || lines !== lastLines) {
      if (opts.json) {
        process.stdout.write(
          `${JSON.stringify({ at: new Date().toISOString(), run_id: view.run_id, status: view.status, settling: view.settling, settlement_blocked: view.settlement.blocked, current_stage: view.current_stage, cursor_ordinal: view.cursor_ordinal, open_lines: view.occupancy.open_lines, stages: view.stages.map((s) => ({ name: s.name, kind: s.kind, status: s.status })) })}\n`,
        );
      } else {
        const blocked = view.settling && view.settlement.blocked ? `: ${String(view.settlement.blocked.message)}` : '';
        const statusLine =
          status !== lastStatus
            ? `${stamp()}  run ${view.run_id} ${status}${view.terminal_reason ? ` (${view.terminal_reason})` : ''}${blocked}\n`
            : '';
        // The run's start comes before its stages; its end after them.
        if (!TERMINAL.has(view.status)) process.stdout.write(statusLine);
        for (const c of changes) process.stdout.write(`${c}\n`);
        if (TERMINAL.has(view.status)) process.stdout.write(statusLine);
      }
      lastStatus = status;
      lastLines = lines;
    }
    if (TERMINAL.has(view.status)) return view.status;
    if (view.status === 'executing') {
      // Q4: a run held before its completing stage is reported with every unresolved obligation.
      const { readBlockingQa } = await import('./blockingQa');
      const report = await readBlockingQa(ctx, runId, null);
      if (report.held) {
        const { unresolvedLines } = await import('../activities/qa/pending');
        const unresolved = unresolvedLines(report);
        if (opts.json)
          process.stdout.write(
            `${JSON.stringify({ at: new Date().toISOString(), run_id: runId, status: 'held', completing_stage: report.completing_stage, unresolved, report })}\n`,
          );
        else {
          process.stdout.write(`${stamp()}  run ${runId} held by blocking QA before ${report.completing_stage}:\n`);
          for (const l of unresolved) process.stdout.write(`  ${l}\n`);
        }
        return 'held';
      }
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs));
  }
}
