import { isTerminalRunStatus } from '../domain/runStatuses';
import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { sessionById } from '../db/sessions';
import { sessionNotRegistered } from '../domain/sessionRefusals';
import { boardActivities } from './board';
import { runReadActivities } from './runs/read';
import { testMachineActivities } from './testMachines';
import { sessionUsageActivities, type UsageViewer } from './usage/sessionUsage';

/** Terminal runs the runs panel keeps showing after they end. */
const RECENT_TERMINAL_RUNS = 10;

/**
 * What the operator dashboard's panels read: the board, runs with stages, occupancy and QA,
 * test machines with health, holder and waiting line, and the machines panel (fleet from the
 * one schedule, U1; 24-hour usage cards, U13). Read-only.
 */
export function dashboardActivities(deps: { db: Kysely<Database>; driverFreshMs?: number }) {
  const { db } = deps;
  const views = boardActivities(deps);
  const runs = runReadActivities(deps);
  const machines = testMachineActivities({ db });
  const usage = sessionUsageActivities({ db });

  async function boardPanel() {
    const { markdown: _markdown, schedule: _schedule, ...board } = await views.board();
    return board;
  }

  async function runsPanel() {
    const all = await runs.listRuns({});
    const live = all.filter((r) => r.status === 'created' || r.status === 'executing');
    const ended = all.filter((r) => isTerminalRunStatus(r.status)).slice(0, RECENT_TERMINAL_RUNS);
    const picked = [...live, ...ended];
    const details = await Promise.all(
      picked.map((r) =>
        runs.getRun({
          runId: r.run_id,
          fields: ['stages', 'occupancy', 'qa', 'driver', 'current_stage', 'member_items', 'settling'],
        }),
      ),
    );
    return picked.map((r, i) => ({ ...r, ...details[i] }));
  }

  async function testMachinesPanel() {
    const [list, waits] = await Promise.all([machines.listTestMachines(), machines.listWaits({})]);
    return list.map((m) => ({
      name: m.name,
      healthy: m.healthy,
      last_verification: m.last_verification
        ? {
            passed: m.last_verification.passed,
            reason: m.last_verification.reason,
            finished_at: m.last_verification.finished_at,
          }
        : null,
      holder: m.holder,
      waiting: m.waiting,
      line: waits
        .filter((w) => w.test_machine === m.name)
        .sort((a, b) => (a.position ?? 1e9) - (b.position ?? 1e9))
        .map((w) => ({
          position: w.position,
          session_id: w.session_id,
          actor_id: w.actor_id,
          state: w.state,
          queued_at: w.queued_at,
          reserved_until: w.reserved_until,
        })),
    }));
  }

  async function fleetPanel() {
    return views.fleet();
  }

  /** U13: the 24-hour cards, bounded by the viewing session's grants when one is given. */
  async function machinesUsagePanel(viewer?: UsageViewer) {
    return usage.machinesUsage(viewer);
  }

  /**
   * Before the dashboard listens: Postgres answers with yoke's schema (else the operator gets a
   * page of failing panels instead of postgres_unreachable, exit 3), and the viewing session, when
   * one is given, is registered (U13: an unknown one could only ever fail the usage cards).
   */
  async function checkReady(viewer?: UsageViewer): Promise<void> {
    const session = await sessionById(db, viewer?.sessionId ?? '');
    if (viewer && !session) throw sessionNotRegistered(viewer.sessionId);
  }

  return { boardPanel, runsPanel, testMachinesPanel, fleetPanel, machinesUsagePanel, checkReady };
}
