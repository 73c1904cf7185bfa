import type { Command } from 'commander';
import { z } from 'zod';
import type { DeploymentRunActivities } from '../../activities/deploymentRuns';
import type { TakeoverReceipt } from '../../activities/runs/takeover';
import { ContainmentAttestation } from '../../domain/containment';
import { usageError } from '../../domain/errors';
import { executeRunCommand } from '../../domain/runStatuses';
import { actingSession, BaseOptions, commandAction, nonEmpty, type CommandContext } from '../context';
import { warn } from '../output';

/** --containment-attestation: the JSON a lane checkout relayed (T3), parsed at the edge. */
function attestation(raw: string | undefined): ContainmentAttestation | undefined {
  if (raw === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw usageError(
      'invalid_containment_attestation',
      `--containment-attestation is not JSON: ${(err as Error).message}`,
      {
        recovery:
          'pass {"predecessor_commit":"SHA","successor_commit":"SHA","contained":true,"attested_by":"lane checkout PATH"}',
      },
    );
  }
  const r = ContainmentAttestation.safeParse(parsed);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw usageError(
      'invalid_containment_attestation',
      `--containment-attestation ${issue.path.join('.') || '(root)'}: ${issue.message}`,
      {
        recovery: 'give predecessor_commit, successor_commit (shas), contained (true/false) and attested_by',
        details: { issues: r.error.issues },
      },
    );
  }
  return r.data;
}

/** What a successor that took over a run does next (takeover and start-for-item alike): its own walk. */
export function executeNext(successorRunId: string): string {
  return `next: ${executeRunCommand(successorRunId)}`;
}

function receiptText(r: TakeoverReceipt): string {
  return [
    `run ${r.successor_run_id} took over run ${r.predecessor_run_id} (now ${r.predecessor_status}, superseded)`,
    `containment: ${r.containment.successor_commit} contains ${r.containment.predecessor_commit} (${r.containment.basis}: ${r.containment.source})`,
    `moved: ${r.moved_members.length} member(s)${r.moved_members.length ? ` (${r.moved_members.join(', ')})` : ''}, ${r.moved_qa.length} QA row(s), ${r.moved_executions.length} execution(s)${r.live_executions.length ? ` (still running: ${r.live_executions.map((id) => `execution ${id}`).join(', ')})` : ''}`,
    `occupancy: ${r.occupancy_units.join(', ') || '(none held)'}`,
    executeNext(r.successor_run_id),
  ].join('\n');
}

/** `yoke deployment-runs takeover RUN --successor NEW` (T1-T3). */
export function registerTakeover(dr: Command, runs: (ctx: CommandContext) => Promise<DeploymentRunActivities>): void {
  dr.command('takeover')
    .description('a newer run of the same flow and target takes over RUN while it waits on QA (T1-T3)')
    .argument('<run>', 'the waiting run (the predecessor)')
    .requiredOption('--successor <run>', "the created run whose candidate contains the predecessor's")
    .option(
      '--containment-attestation <json>',
      "a lane checkout's containment verdict, when this host's repository cannot answer",
    )
    .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
    .action(
      commandAction(
        BaseOptions.extend({ successor: nonEmpty, containmentAttestation: z.string().optional() }),
        async (ctx, o, [runId]) => {
          const sessionId = actingSession(o);
          const relayed = attestation(o.containmentAttestation);
          const r = await (
            await runs(ctx)
          ).takeoverRun({ sessionId, runId: runId!, successorRunId: o.successor, attestation: relayed });
          for (const w of r.warnings) warn(!!o.json, `warning: ${w}`);
          return r;
        },
        receiptText,
      ),
    );
}
