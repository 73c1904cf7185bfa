import { DEFAULT_DRIVER_FRESH_MS } from '../../domain/timeouts';
import { failingEffectsText } from '../../domain/settlementEffects';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { projectById, requireProject } from '../../db/projects';
import { releaseLineage, type LineageEntry } from '../../db/memberClosure';
import { occupancyUnitsOf } from '../../db/occupancy';
import { removalsOf } from '../../db/runMembers';
import { qaRowsOf } from '../../db/runQa';
import { driverAttachmentLive, environmentById, listRunRows, runById, runFlow } from '../../db/runs';
import { stagesOf } from '../../db/runStages';
import { effectsOf } from '../../db/settlementEffects';
import { drivesNothing, isTerminalRunStatus, type RunStatus } from '../../domain/runStatuses';
import { qaAttemptsOf, takeoverChain } from '../../db/takeover';
import { usageError } from '../../domain/errors';
import { failedQaRecovery } from '../../domain/qaStages';
import { carriedWork, membersOf, selectionOf, type CarriedWork } from './membership';
import { memberClosure, type MemberClosureView } from './memberClosure';
import { openLines } from './occupancy';

/** What names a run: shared by the creation receipt and every read. */
export interface RunIdentity {
  run_id: string;
  project: string;
  flow: string;
  target: string;
  candidate_sha: string;
  status: string;
}

export interface RunView extends RunIdentity {
  current_stage: string | null;
  cursor_ordinal: number;
  idempotency_key: string | null;
  idempotency_basis: 'recorded_key' | null;
  created_at: string;
  executing_at: string | null;
  frozen_at: string | null;
  settling_at: string | null;
  /** S1: executing with settling_at recorded: completion authority reads it as delivered. */
  settling: boolean;
  settlement: {
    committed_at: string | null;
    blocked: Record<string, unknown> | null;
    effects: {
      item: string;
      effect: string;
      applied_at: string | null;
      outcome: string | null;
      last_error: string | null;
    }[];
  };
  terminal_at: string | null;
  terminal_reason: string | null;
  driver: { session_id: string; heartbeat_at: string; live: boolean } | null;
  occupancy: { units: string[]; occupying: boolean; open_lines: string[] };
  stages: {
    ordinal: number;
    name: string;
    kind: string;
    target_env: string;
    status: string;
    started_at: string | null;
    finished_at: string | null;
    detail: string | null;
    /** An approval stage's approver once approved (R1), else null. */
    approved_by_actor_id: string | null;
  }[];
  qa: {
    check_name: string;
    source: string;
    blocking: boolean;
    status: string;
    stage_name: string | null;
    retracted: string | null;
    /** T3: the run that recorded this answer (an ancestor's, for an attempt a takeover carried). */
    verdict_run_id: string | null;
  }[];
  /** T3: every QA plan execution the run owns, with the run that recorded each verdict. */
  qa_executions: QaAttempt[];
  member_items: {
    item: string;
    added_at: string;
    delivery_intent: string;
    requirement_selection: string[];
    selection_derived: boolean;
    requirement_snapshot: unknown;
    containment_attestation: unknown;
  }[];
  membership_removals: {
    item: string;
    reason: string;
    removed_at: string;
    later_run_id: string | null;
    removed_by_session_id: string | null;
  }[];
  carried_work: CarriedWork;
  supersedes_run_id: string | null;
  superseded_by_run_id: string | null;
  release_lineage: LineageEntry[];
  /** T2: the takeover chain through this run, oldest first (just this run when none). */
  takeover_chain: string[];
  /**
   * Q4 O4: what to do next about a blocking obligation recorded failed (record it again, then
   * retry), as get's text prints it on its `next:` line (failedQaRecovery); null otherwise.
   */
  recovery: string | null;
  member_closure?: MemberClosureView;
}

export interface QaAttempt {
  execution_id: number;
  stage: string;
  plan_id: string;
  item: string | null;
  status: string;
  verdict_run_id: string | null;
  cases: { case: string; verdict: string; verdict_run_id: string | null }[];
}

export const RUN_FIELDS = [
  'run_id',
  'project',
  'flow',
  'target',
  'candidate_sha',
  'status',
  'current_stage',
  'cursor_ordinal',
  'idempotency_key',
  'idempotency_basis',
  'created_at',
  'executing_at',
  'frozen_at',
  'settling_at',
  'settling',
  'settlement',
  'terminal_at',
  'terminal_reason',
  'driver',
  'occupancy',
  'stages',
  'qa',
  'member_items',
  'membership_removals',
  'carried_work',
  'supersedes_run_id',
  'superseded_by_run_id',
  'release_lineage',
  'takeover_chain',
  'qa_executions',
  'recovery',
] as const;

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/** T3: the run's executions and cases, each crediting the run that recorded it. */
async function qaAttempts(db: Kysely<Database>, runId: string): Promise<QaAttempt[]> {
  const rows = await qaAttemptsOf(db, runId);
  const out = new Map<number, QaAttempt>();
  for (const r of rows) {
    const a = out.get(r.execution_id) ?? {
      execution_id: r.execution_id,
      stage: r.stage_name,
      plan_id: r.plan_id,
      item: r.item,
      status: r.status,
      verdict_run_id: r.execution_verdict_run_id,
      cases: [],
    };
    if (r.case_name) a.cases.push({ case: r.case_name, verdict: r.verdict!, verdict_run_id: r.case_verdict_run_id });
    out.set(r.execution_id, a);
  }
  return [...out.values()];
}

export function runReadActivities(deps: { db: Kysely<Database>; driverFreshMs?: number }) {
  const { db } = deps;
  const freshMs = deps.driverFreshMs ?? DEFAULT_DRIVER_FRESH_MS;

  async function getRun(input: {
    runId: string;
    includeMemberClosure?: boolean;
    fields?: string[];
  }): Promise<Partial<RunView>> {
    const unknown = (input.fields ?? []).filter(
      (f) => !(RUN_FIELDS as readonly string[]).includes(f) && f !== 'member_closure',
    );
    if (unknown.length) {
      throw usageError('unknown_run_field', `unknown run field(s): ${unknown.join(', ')}`, {
        recovery: `choose from: ${RUN_FIELDS.join(', ')}`,
        details: { fields: unknown },
      });
    }
    const run = await runById(db, input.runId);
    const flow = await runFlow(db, run);
    const [project, target, stages, qa, removals, units, members, live, lineage] = await Promise.all([
      projectById(db, run.project_id),
      environmentById(db, run.target_environment_id),
      stagesOf(db, run.run_id),
      qaRowsOf(db, run.run_id),
      removalsOf(db, run.run_id),
      occupancyUnitsOf(db, run.run_id),
      membersOf(db, run.run_id),
      // a run that can never move again has no live driver, whatever its last heartbeat
      drivesNothing(run) ? false : driverAttachmentLive(db, run, freshMs),
      releaseLineage(db, run.run_id),
    ]);
    // T2: a created successor holds the occupancy it took over.
    const occupying =
      (run.status === 'executing' || (run.status === 'created' && units.length > 0)) && !run.occupancy_released_at;
    const memberItems = [];
    for (const m of members) {
      memberItems.push({
        item: m.item,
        added_at: m.added_at.toISOString(),
        delivery_intent: m.delivery_intent,
        requirement_selection: await selectionOf(db, flow, m, m.requirement_selection),
        selection_derived: m.requirement_selection === null,
        requirement_snapshot: m.requirement_snapshot,
        containment_attestation: m.containment_attestation,
      });
    }
    const stageViews = stages.length
      ? stages.map((s) => ({
          ordinal: s.ordinal,
          name: s.name,
          kind: s.kind,
          target_env: s.target_env,
          status: s.status,
          started_at: iso(s.started_at),
          finished_at: iso(s.finished_at),
          detail: s.detail,
          approved_by_actor_id: s.approved_by_actor_id,
        }))
      : flow.stages.map((s, ordinal) => ({
          ordinal,
          name: s.name,
          kind: s.kind,
          target_env: s.target,
          // a run that ended before executing never runs its stages: they read cancelled, as a failed run's rest do
          status: isTerminalRunStatus(run.status) ? 'cancelled' : 'pending',
          started_at: null,
          finished_at: null,
          detail: null,
          approved_by_actor_id: null,
        }));
    const settling = run.status === 'executing' && run.settling_at !== null;
    const effects = (await effectsOf(db, run.run_id)).map((e) => ({ ...e, applied_at: iso(e.applied_at) }));
    // S3: an effect that failed and was not applied since keeps the run settling until a replay
    const failing = failingEffectsText(effects) !== '';
    const view: RunView = {
      run_id: run.run_id,
      project: project.name,
      flow: flow.name,
      target: target.name,
      candidate_sha: run.candidate_sha,
      status: run.status,
      current_stage: run.current_stage,
      cursor_ordinal: run.cursor_ordinal,
      idempotency_key: run.create_idempotency_key,
      idempotency_basis: run.create_idempotency_key ? 'recorded_key' : null,
      created_at: run.created_at.toISOString(),
      executing_at: iso(run.executing_at),
      frozen_at: iso(run.frozen_at),
      settling_at: iso(run.settling_at),
      settling,
      settlement: {
        committed_at: iso(run.settlement_committed_at),
        blocked: run.status === 'executing' ? run.settlement_blocked : null,
        effects,
      },
      terminal_at: iso(run.terminal_at),
      terminal_reason: run.terminal_reason,
      driver: run.driver_session_id
        ? {
            session_id: run.driver_session_id,
            heartbeat_at: run.driver_heartbeat_at!.toISOString(),
            live,
          }
        : null,
      occupancy: {
        units,
        occupying,
        open_lines: occupying ? await openLines(db, run.run_id) : [],
      },
      stages: stageViews,
      qa: qa.map((q) => ({
        check_name: q.check_name,
        source: q.source,
        blocking: q.blocking,
        status: q.status,
        stage_name: q.stage_name,
        retracted: q.retraction,
        verdict_run_id: q.verdict_run_id,
      })),
      member_items: memberItems,
      membership_removals: removals.map((r) => ({
        item: r.item,
        reason: r.reason,
        removed_at: r.removed_at.toISOString(),
        later_run_id: r.later_run_id,
        removed_by_session_id: r.removed_by_session_id,
      })),
      carried_work: await carriedWork(db, run, flow),
      supersedes_run_id: run.supersedes_run_id,
      superseded_by_run_id: run.superseded_by_run_id,
      release_lineage: lineage,
      takeover_chain: await takeoverChain(db, run.run_id),
      qa_executions: await qaAttempts(db, run.run_id),
      // the run's stages tell an obligation failed after its stage passed (a hold, not a failure)
      recovery:
        failedQaRecovery(
          run,
          qa.map((q) => ({ ...q, retracted: q.retraction })),
          stageViews,
        ) ??
        (settling && failing
          ? `fix the cause and replay: yoke deployment-runs update ${run.run_id} status succeeded`
          : null),
    };
    if (input.includeMemberClosure || input.fields?.includes('member_closure'))
      view.member_closure = await memberClosure(db, run.run_id);
    if (!input.fields?.length) return view;
    const picked: Record<string, unknown> = { run_id: view.run_id };
    for (const f of input.fields) picked[f] = view[f as keyof RunView];
    if (view.member_closure) picked.member_closure = view.member_closure;
    return picked as Partial<RunView>;
  }

  async function listRuns(input: { project?: string; status?: string }) {
    const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
    const rows = await listRunRows(db, { projectId, status: input.status as RunStatus | undefined }, freshMs);
    // R1: as get reads it: a run that can never move again has no live driver, whatever its last heartbeat.
    return rows.map(({ driver_attachment_live, superseded_by_run_id, ...r }) => ({
      ...r,
      created_at: r.created_at.toISOString(),
      driver_live: driver_attachment_live && !drivesNothing({ status: r.status, superseded_by_run_id }),
    }));
  }

  return { getRun, listRuns, memberClosure: (runId: string) => memberClosure(db, runId) };
}
