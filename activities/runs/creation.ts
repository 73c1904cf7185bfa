import type { Kysely, Transaction } from 'kysely';
import { advisoryXactLock } from '../../db/advisoryLock';
import type { Database, FlowRow, RunRow } from '../../db/database';
import { recordEvent } from '../../db/events';
import { defaultCompletionFlow } from '../../db/items';
import { setLocalTimeouts } from '../../db/localTimeouts';
import { existingItem, projectByPrefix, requireProject } from '../../db/projects';
import { requireLiveSession } from '../../db/sessions';
import type { Executor } from '../../db/pool';
import { membersOf } from '../../db/runMembers';
import {
  environmentByName,
  flowByName,
  insertCreatedRun,
  obligationsOf,
  runById,
  runByIdempotencyKey,
} from '../../db/runs';
import { untargetedObligations, type UntargetedObligation } from '../../domain/admission';
import { canonicalRequest, differingFields, type CreateRequest } from '../../domain/canonicalRequest';
import { refusal, unreachable, usageError, YokeError } from '../../domain/errors';
import { parseItemRef } from '../../domain/itemRef';
import { assertComposition, composition, dependencyWarnings, type DependencyWarning } from './composition';
import { admitMembers, materializeFlowDefaults, type ExplicitSelection } from './membership';
import type { RunIdentity } from './read';
import { takeoverActivities, type TakeoverNotifier, type TakeoverReceipt } from './takeover';

export interface CreateRunInput {
  sessionId?: string;
  project: string;
  flow: string;
  target: string;
  candidate: string;
  idempotencyKey?: string;
  items: string[];
  requirementIds?: string[];
  planIds?: string[];
  /** I2: how long the whole create may take before it answers `deployment_run_create_timeout`. */
  timeoutMs?: number;
}

export interface CreateReceipt extends RunIdentity {
  replayed: boolean;
  idempotency_key: string | null;
  /** I2: `recorded_key` when the request carried a key, null when unkeyed. */
  idempotency_basis: 'recorded_key' | null;
  member_items: string[];
  warnings: (UntargetedObligation | DependencyWarning)[];
  /** D4: the waiting run this start took over, when it took one over. */
  takeover?: TakeoverReceipt | null;
  /** D4: waiting runs of the same flow and target it did not take over, and why. */
  takeover_skipped?: { run_id: string; reason: string }[];
}

const CANDIDATE = /^[0-9a-f]{7,64}$/i;

function validateCandidate(candidate: string): void {
  if (!CANDIDATE.test(candidate)) {
    throw usageError('invalid_candidate', `candidate "${candidate}" is not a commit sha`, {
      recovery: 'pass the commit to deliver, e.g. --candidate $(git rev-parse HEAD)',
      details: { candidate },
    });
  }
}

/** Postgres gave up waiting (lock_timeout / statement_timeout): the create timed out (I2). */
export function isTimeout(err: unknown): boolean {
  const code = (err as { code?: string })?.code;
  return code === '55P03' || code === '57014';
}

/** I2: the create did not answer within its deadline; a repeat under the same key recovers it. */
function creationTimedOut(input: CreateRunInput): Error {
  return unreachable(
    'deployment_run_create_timeout',
    `creating the run did not finish within ${input.timeoutMs} ms (another creation holds the project's lock, or Postgres stopped answering)`,
    {
      recovery: 're-run the identical command: the same --idempotency-key returns the run if one was created',
      details: { idempotency_key: input.idempotencyKey ?? null, timeout_ms: input.timeoutMs ?? null },
    },
  );
}

/**
 * I2: answers by the deadline whatever the work is doing; a connection that stopped answering
 * cannot hold the caller. Work that settles after the deadline has already been answered for.
 */
async function withinDeadline<T>(work: Promise<T>, timeoutMs: number | undefined, timedOut: () => Error): Promise<T> {
  if (!timeoutMs) return work;
  work.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timedOut()), timeoutMs);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

export function runCreationActivities(deps: {
  db: Kysely<Database>;
  driverFreshMs?: number;
  takeoverNotifier?: TakeoverNotifier;
  takeoverLockTimeoutMs?: number;
}) {
  const { db } = deps;
  const takeovers = takeoverActivities(deps);

  /**
   * The creation transaction (I1, O5): under the project's creation lock, re-check the key,
   * insert the run, its flow-default QA rows and its members. Composition reads that need no
   * lock happen before it is taken.
   */
  async function insertRun(
    trx: Transaction<Database>,
    input: CreateRunInput,
    request: CreateRequest,
    flow: FlowRow,
    projectId: number,
    targetId: number,
    members: { item_id: number; item: string }[],
    takeOver?: (trx: Transaction<Database>, runId: string) => Promise<Omit<TakeoverReceipt, 'warnings'> | null>,
  ): Promise<CreateReceipt> {
    await advisoryXactLock(trx, `run-create:${projectId}`);
    const receipt = (
      runId: string,
      status: string,
      replayed: boolean,
      warnings: CreateReceipt['warnings'],
      memberItems: string[] = request.items,
    ): CreateReceipt => ({
      run_id: runId,
      project: request.project,
      flow: request.flow,
      target: request.target,
      candidate_sha: request.candidate,
      status,
      replayed,
      idempotency_key: input.idempotencyKey ?? null,
      idempotency_basis: input.idempotencyKey ? 'recorded_key' : null,
      member_items: memberItems,
      warnings,
    });
    // I1: a replay (an I2 repeat too) answers for the original run as it is now: D6's untargeted
    // obligations of its current members and D7's unsatisfied dependencies, read again.
    const replayWarnings = async (run: RunRow, current: { item_id: number }[]) => {
      const warnings: CreateReceipt['warnings'] = [];
      for (const m of current)
        warnings.push(...untargetedObligations(await obligationsOf(trx, [m.item_id]), flow.stages));
      warnings.push(...dependencyWarnings(await composition(trx, run, flow, 'create')));
      return warnings;
    };
    if (input.idempotencyKey) {
      const existing = await runByIdempotencyKey(trx, projectId, input.idempotencyKey);
      if (existing) {
        const differing = differingFields(request, existing.create_request);
        // I1: the original run as it is now: its status and its members (an add-item, a
        // remove-item or a takeover since the create changed them), not the request's echo
        if (differing.length === 0) {
          const current = await membersOf(trx, existing.run_id);
          return receipt(
            existing.run_id,
            existing.status,
            true,
            await replayWarnings(await runById(trx, existing.run_id), current),
            current.map((m) => m.item),
          );
        }
        throw refusal(
          'idempotency_key_conflict',
          `idempotency key ${input.idempotencyKey} already created run ${existing.run_id} with different ${differing.join(', ')}`,
          {
            recovery: `repeat the original request to get run ${existing.run_id} back, or use a new --idempotency-key for a deliberately different run`,
            details: {
              run_id: existing.run_id,
              idempotency_key: input.idempotencyKey,
              differing_fields: differing,
              recorded_request: existing.create_request,
              request,
            },
          },
        );
      }
    }
    const run = await insertCreatedRun(trx, {
      project_id: projectId,
      flow_id: flow.flow_id,
      target_environment_id: targetId,
      candidate_sha: request.candidate,
      create_idempotency_key: input.idempotencyKey ?? null,
      create_request: request,
      created_by_session_id: input.sessionId ?? null,
    });
    await materializeFlowDefaults(trx, run, flow);
    // D4: the takeover moves the waiting run's members before enrolment, so a moved item is
    // enrolled once: as it was moved, with its snapshots and QA.
    const taken = takeOver ? await takeOver(trx, run.run_id) : null;
    const moved = new Set(taken?.moved_members ?? []);
    const selection: ExplicitSelection = { requirementIds: request.requirement_ids, planIds: request.plan_ids };
    const warnings: CreateReceipt['warnings'] = [];
    warnings.push(
      ...(await admitMembers(
        trx,
        run,
        flow,
        members.filter((m) => !moved.has(m.item)),
        selection,
      )),
    );
    const checked = await composition(trx, run, flow, 'create');
    assertComposition(checked); // D9
    // D7: a member whose dependency is unsatisfied is named now; settlement would hold it.
    warnings.push(...dependencyWarnings(checked));
    await recordEvent(trx, {
      event_type: 'DeploymentRunCreated',
      project_id: projectId,
      session_id: input.sessionId ?? null,
      payload: { run_id: run.run_id, request },
    });
    if (!taken) return receipt(run.run_id, run.status, false, warnings);
    const chained = await membersOf(trx, run.run_id);
    // D6 is said of every member: one the takeover moved in was not admitted here, and is named too
    for (const m of chained)
      if (moved.has(m.item))
        warnings.push(...untargetedObligations(await obligationsOf(trx, [m.item_id]), flow.stages));
    const made = receipt(run.run_id, run.status, false, warnings);
    return { ...made, member_items: chained.map((m) => m.item), takeover: { ...taken, warnings: [] } };
  }

  async function resolve(executor: Transaction<Database>, input: CreateRunInput) {
    validateCandidate(input.candidate);
    if (input.sessionId) await requireLiveSession(executor, input.sessionId);
    const project = await requireProject(executor, input.project);
    const flow = await flowByName(executor, project.project_id, project.name, input.flow);
    const target = await environmentByName(executor, project.project_id, project.name, input.target);
    const members = [];
    for (const ref of [...new Set(input.items.map((i) => i.toUpperCase()))]) {
      const item = await existingItem(executor, parseItemRef(ref));
      if (item.project_id !== project.project_id) {
        throw refusal('item_outside_project', `item ${item.item} does not belong to project ${project.name}`, {
          recovery: `create the run in the item's own project, or drop --item ${item.item}`,
          details: { item: item.item, project: project.name },
        });
      }
      members.push({ item_id: item.item_id, item: item.item });
    }
    const request = canonicalRequest({
      project: project.name,
      flow: flow.name,
      target: target.name,
      candidate: input.candidate,
      items: members.map((m) => m.item),
      requirement_ids: input.requirementIds ?? [],
      plan_ids: input.planIds ?? [],
    });
    return { project, flow, target, members, request };
  }

  /**
   * I2: the whole create answers within `timeoutMs`, however it stalls: waiting for a lock, a
   * slow statement, or a connection that stopped answering. Postgres bounds what it can see
   * (lock_timeout, statement_timeout) and a client deadline bounds the rest; the caller then
   * repeats once under the same key, which returns the run if this one committed after all.
   */
  async function withCreationTimeout<T>(
    input: CreateRunInput,
    fn: (trx: Transaction<Database>) => Promise<T>,
  ): Promise<T> {
    const timeoutMs = input.timeoutMs;
    const timedOut = () => creationTimedOut(input);
    const work = db
      .transaction()
      .execute(async (trx) => {
        if (timeoutMs) {
          const ms = `${Math.ceil(timeoutMs)}ms`;
          await setLocalTimeouts(trx, { lockTimeout: ms, statementTimeout: ms });
        }
        return fn(trx);
      })
      .catch((err: unknown) => {
        throw isTimeout(err) ? timedOut() : err;
      });
    return withinDeadline(work, timeoutMs, timedOut);
  }

  /** `deployment-runs create` (I1, D3, D5, D6, O5). */
  async function createRun(input: CreateRunInput): Promise<CreateReceipt> {
    validateCandidate(input.candidate);
    // Resolution inside the creation transaction: a refused create writes nothing, and the
    // whole create stays within its deadline (I2).
    return withCreationTimeout(input, async (trx) => {
      const { project, flow, target, members, request } = await resolve(trx, input);
      return insertRun(trx, input, request, flow, project.project_id, target.environment_id, members);
    });
  }

  /** Where start-for-item delivers: the items' project, its completion flow unless named, the flow's last deploy target. */
  async function startScope(executor: Executor, input: { items: string[]; flow?: string; target?: string }) {
    const prefixes = [...new Set(input.items.map((i) => parseItemRef(i).prefix))];
    if (prefixes.length > 1) {
      throw refusal('items_span_projects', `items ${input.items.join(', ')} belong to more than one project`, {
        recovery: 'start one run per project',
        details: { items: input.items },
      });
    }
    const project = await projectByPrefix(executor, prefixes[0]!);
    if (!project) {
      throw refusal('item_prefix_unknown', `no project uses the item prefix ${prefixes[0]}`, {
        recovery: 'apply the project definition first: yoke apply -f project.yaml',
        details: { prefix: prefixes[0] },
      });
    }
    let flowName = input.flow;
    if (!flowName) {
      const completion = await defaultCompletionFlow(executor, project.project_id);
      if (!completion) {
        throw refusal(
          'completion_flow_missing',
          `project ${project.name} has no completion flow to deliver ${input.items.join(', ')}`,
          {
            recovery: 'name one with --flow F, or mark a flow completion_flow: true and apply',
            details: { project: project.name },
          },
        );
      }
      flowName = completion.name;
    }
    const flow = await flowByName(executor, project.project_id, project.name, flowName);
    const deploys = flow.stages.filter((s) => s.kind === 'deploy');
    const target = input.target ?? (deploys[deploys.length - 1] ?? flow.stages[flow.stages.length - 1]!).target;
    return { project, flow, target };
  }

  /**
   * `deployment-runs start-for-item` (D4): creation, takeover of a run waiting on QA on the same
   * flow and target, membership and composition validation in one transaction, so a refusal at
   * any step writes nothing. The takeover's containment is prepared before the transaction (a
   * git call holds no lock); the transaction rechecks it under bounded locks.
   */
  async function startForItem(
    input: Omit<CreateRunInput, 'project' | 'flow' | 'target'> & { flow?: string; target?: string },
  ): Promise<CreateReceipt> {
    if (input.items.length === 0) {
      throw usageError('items_required', 'start-for-item needs at least one PREFIX-N', {
        recovery: 'yoke deployment-runs start-for-item WEB-12 --candidate SHA',
      });
    }
    validateCandidate(input.candidate);
    let start: Awaited<ReturnType<typeof takeovers.prepareStartTakeover>> = { prepared: null, skipped: [] };
    try {
      const scope = await startScope(db, input);
      const target = await environmentByName(db, scope.project.project_id, scope.project.name, scope.target);
      start = await takeovers.prepareStartTakeover({
        projectId: scope.project.project_id,
        flowId: scope.flow.flow_id,
        targetId: target.environment_id,
        candidate: input.candidate,
        sessionId: input.sessionId ?? null,
      });
    } catch (err) {
      // The transaction below resolves the same scope and refuses with the same named error.
      if (!(err instanceof YokeError)) throw err;
    }
    const { prepared } = start;
    const receipt = await withCreationTimeout({ ...input, project: '', flow: '', target: '' }, async (trx) => {
      const { project, flow, target } = await startScope(trx, input);
      const full: CreateRunInput = { ...input, project: project.name, flow: flow.name, target };
      const resolved = await resolve(trx, full);
      return insertRun(
        trx,
        full,
        resolved.request,
        resolved.flow,
        project.project_id,
        resolved.target.environment_id,
        resolved.members,
        prepared
          ? (t, successorRunId) =>
              takeovers.takeOverInside(t, { ...prepared, successor_run_id: successorRunId }, input.sessionId ?? null)
          : undefined,
      );
    });
    const takeover = receipt.takeover
      ? { ...receipt.takeover, warnings: await takeovers.afterCommit(receipt.takeover) }
      : null;
    return { ...receipt, takeover, takeover_skipped: start.skipped };
  }

  return { createRun, startForItem };
}
