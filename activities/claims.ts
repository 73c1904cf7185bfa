import type { Kysely, Transaction } from 'kysely';
import type { Database, ClaimRow } from '../db/database';
import {
  claimView,
  claimViews,
  heartbeatClaim,
  insertClaimRow,
  insertClaimView,
  liveHolder,
  type ClaimView,
  type NewClaimInput,
  type ReleaseMark,
} from '../db/claims';
import { recordEvent } from '../db/events';
import { ensureItem, hasPermission, requireProject } from '../db/projects';
import { requireLiveSession, sessionById } from '../db/sessions';
import { isUnhealthy, lockLine } from '../db/waits';
import { deployLockRetired, heldRefusal, type Wanted } from '../domain/claimRefusals';
import { OPERATOR_KEYED_KINDS, isSticky } from '../domain/claimKinds';
import { refusal, usageError, type YokeError } from '../domain/errors';
import { parseItemRef } from '../domain/itemRef';
import { parseOperatorKey } from '../domain/operatorKeys';
import {
  DEFAULT_RESERVATION_LIFETIME_MS,
  consumeReservation,
  expireReservations,
  grantOwnWait,
  inLineTransaction,
  joinLine,
  lockClaimForRelease,
  releaseServingLine,
  serveLine,
  type LineEffects,
  type LineOptions,
  type Reservation,
} from './waitingLine';

export const CLAIMS_RELEASE = 'claims.release';
export const OPERATOR_RELEASE_EVENT = 'WARNOperatorLeaseRelease';

export interface AcquireResult {
  claim: ClaimView;
  /** True when the caller already held it (same session, or C4 the owning item re-entering). */
  reentered: boolean;
  /** W7: the caller's reserved turn in the waiting line was consumed by this acquire. */
  consumed_reservation: boolean;
  warnings: string[];
}

/** W4: a refused QA_HOST acquire joins the waiting line with the command that resumes it. */
export interface JoinRequest {
  resumeCommand: string;
  qaPlanExecutionId?: number;
}

export interface AcquireCoordinationInput {
  sessionId: string;
  key: string;
  project?: string;
  item?: string;
  join?: JoinRequest;
  /** A verification or golden capture takes even an unhealthy machine, ahead of the line (W8). */
  bypassLine?: boolean;
}

export interface OperatorReleaseInput {
  actingSessionId: string;
  key: string;
  claimId: number;
  holderSessionId: string;
  reason: string;
  project?: string;
  hookContext?: boolean;
}

export interface WorkReleaseInput {
  actingSessionId: string;
  claimId: number;
  reason: string;
  hookContext?: boolean;
}

export interface ReleaseResult {
  claim: ClaimView;
  /** The WARNOperatorLeaseRelease event written before the release, when an operator released it. */
  operator_event_id: string | null;
  /** W7: the waiting-line turn this release reserved, if any. */
  reservations: Reservation[];
  warnings: string[];
}

function requireReason(reason: string): string {
  const trimmed = reason.trim();
  if (!trimmed) {
    throw usageError('reason_required', 'a release needs a non-empty --reason', {
      recovery: 'say why, for example --reason "suite finished"; the reason is kept on the claim row',
    });
  }
  return trimmed;
}

export function claimActivities(deps: { db: Kysely<Database>; line?: Partial<LineOptions> }) {
  const { db } = deps;
  const lifetimeMs = deps.line?.reservationLifetimeMs ?? DEFAULT_RESERVATION_LIFETIME_MS;
  const notifier = deps.line?.notifier;

  const withLine = <T>(fn: Parameters<typeof inLineTransaction<T>>[2]) => inLineTransaction<T>(db, notifier, fn);

  /**
   * Takes the claim in one statement when its unit is free; otherwise decides, in a short
   * transaction, between re-entry and a refusal naming the holder. The unique partial index
   * is the judge (C3); the holder read only explains a loss.
   */
  async function take(
    wanted: Wanted,
    claim: NewClaimInput,
    mayReenter: (h: ClaimRow) => boolean,
  ): Promise<AcquireResult> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const fresh = await insertClaimView(db, claim);
      if (fresh) return { claim: fresh, reentered: false, consumed_reservation: false, warnings: [] };
      const outcome = await db.transaction().execute(async (trx) => {
        await requireLiveSession(trx, claim.session_id);
        const holder = await liveHolder(trx, claim);
        if (!holder) return undefined; // released since our insert: try it again
        if (mayReenter(holder)) {
          await heartbeatClaim(trx, holder.claim_id);
          return {
            claim: await claimView(trx, holder.claim_id),
            reentered: true,
            consumed_reservation: false,
            warnings: [],
          };
        }
        throw heldRefusal(wanted, await claimView(trx, holder.claim_id));
      });
      if (outcome) return outcome;
    }
    throw contended(wanted, claim);
  }

  function contended(wanted: Wanted, claim: NewClaimInput): YokeError {
    return refusal('claim_contended', `${wanted.label} changed hands three times while being taken`, {
      recovery: 'run the same command again',
      details: { key: claim.key },
    });
  }

  function unhealthyRefusal(machine: string): YokeError {
    return refusal(
      'test_machine_unhealthy',
      `test machine ${machine} is unhealthy: its newest check is a failed verification`,
      {
        recovery: `wait in line for a successful verification, or verify it: yoke test-machine verify ${machine}`,
        details: { test_machine: machine },
      },
    );
  }

  /**
   * QA_HOST acquire with the waiting line (W2, W4, W5, W7). The fast path takes a free,
   * healthy machine nobody waits for. Otherwise, under the line's lock: the caller's own
   * reserved turn is consumed; a free machine goes to the oldest live waiter first; and a
   * refusal joins the line in the same transaction, so no release can slip between them.
   */
  async function takeTestMachine(
    wanted: Wanted,
    claim: NewClaimInput,
    opts: { join?: JoinRequest; bypassLine?: boolean },
  ): Promise<AcquireResult> {
    const machine = String(claim.scope.test_machine);
    const fresh = await insertClaimView(db, claim, { lineGuard: !opts.bypassLine });
    if (fresh) return { claim: fresh, reentered: false, consumed_reservation: false, warnings: [] };
    const { value, warnings } = await withLine<Omit<AcquireResult, 'warnings'>>(async (trx, effects) => {
      const session = await requireLiveSession(trx, claim.session_id);
      await lockLine(trx, machine);
      await expireReservations(trx, lifetimeMs, effects, machine);
      for (let attempt = 0; attempt < 3; attempt++) {
        const holder = await liveHolder(trx, claim);
        if (holder?.session_id === session.session_id) {
          if (holder.reserved_until) {
            await consumeReservation(trx, holder);
            return { claim: await claimView(trx, holder.claim_id), reentered: false, consumed_reservation: true };
          }
          await heartbeatClaim(trx, holder.claim_id);
          return { claim: await claimView(trx, holder.claim_id), reentered: true, consumed_reservation: false };
        }
        let why: YokeError | undefined;
        if (holder) why = heldRefusal(wanted, await claimView(trx, holder.claim_id));
        else if (!opts.bypassLine && (await isUnhealthy(trx, machine))) why = unhealthyRefusal(machine);
        else if (!opts.bypassLine && (await serveLine(trx, machine, lifetimeMs, effects))) continue; // now reserved: look again
        if (why) {
          if (!opts.join) return { refused: why };
          const joined = await joinLine(
            trx,
            {
              test_machine: machine,
              session_id: session.session_id,
              actor_id: session.actor_id,
              resume_command: opts.join.resumeCommand,
              rationale: `${why.code}: ${why.message}`,
              qa_plan_execution_id: opts.join.qaPlanExecutionId ?? null,
            },
            effects,
          );
          why.details.wait = {
            wait_id: joined.wait.wait_id,
            position: joined.position,
            queued_at: joined.wait.queued_at.toISOString(),
            joined_now: joined.joined,
            resume_command: joined.wait.resume_command,
          };
          why.message += `; ${joined.joined ? 'joined' : 'still in'} the waiting line at position ${joined.position}`;
          return { refused: why };
        }
        const inserted = await insertClaimRow(trx, claim);
        if (inserted) {
          await grantOwnWait(trx, machine, session.session_id, inserted.claim_id);
          return { claim: await claimView(trx, inserted.claim_id), reentered: false, consumed_reservation: false };
        }
      }
      throw contended(wanted, claim);
    });
    return { ...value, warnings };
  }

  async function acquireCoordinationClaim(input: AcquireCoordinationInput): Promise<AcquireResult> {
    const key = parseOperatorKey(input.key);
    if (key.kind === 'deploy_serialization') throw deployLockRetired(key.key);
    const wanted: Wanted = { kind: key.kind, label: key.key, key: key.key, project: input.project ?? null };
    const sameSession = (h: ClaimRow) => h.session_id === input.sessionId;
    switch (key.kind) {
      case 'qa_admission': {
        // C2/C3: a physical machine is one resource whichever project drives it; the project
        // is recorded only to find the holder's project for an operator release (C8).
        const project = input.project ? await requireProject(db, input.project) : undefined;
        const claim: NewClaimInput = {
          target_kind: 'qa_admission',
          scope: { test_machine: key.testMachine },
          key: key.key,
          project_id: project?.project_id ?? null,
          item_id: null,
          session_id: input.sessionId,
        };
        return takeTestMachine(wanted, claim, { join: input.join, bypassLine: input.bypassLine });
      }
      case 'migration_serialization': {
        if (!input.project || !input.item) {
          throw usageError('migration_owner_required', `${key.key} needs --project P and the owning --item PREFIX-N`, {
            recovery: `yoke coordination-claim acquire --key ${key.key} --project P --item PREFIX-N`,
            details: { key: key.key },
          });
        }
        const project = await requireProject(db, input.project);
        const item = await ensureItem(db, parseItemRef(input.item));
        if (item.project_id !== project.project_id) {
          throw refusal('item_outside_project', `item ${item.item} does not belong to project ${project.name}`, {
            recovery: `name an item of ${project.name} (prefix ${project.item_prefix}-N)`,
            details: { item: item.item, project: project.name },
          });
        }
        const claim: NewClaimInput = {
          target_kind: 'migration_serialization',
          scope: { project_id: project.project_id, model: key.model, item_id: item.item_id },
          key: key.key,
          project_id: project.project_id,
          item_id: item.item_id,
          session_id: input.sessionId,
        };
        // C4: the owning item re-enters and heartbeats its hold; any other item is refused.
        return take(wanted, claim, (h) => h.item_id === item.item_id);
      }
      case 'route_qualification': {
        if (!input.project) {
          throw usageError('project_required', `${key.key} is a per-project grant and needs --project P`, {
            recovery: `yoke coordination-claim acquire --key ${key.key} --project P`,
            details: { key: key.key },
          });
        }
        const project = await requireProject(db, input.project);
        const claim: NewClaimInput = {
          target_kind: 'route_qualification',
          scope: { project_id: project.project_id, grant_key: key.grantKey },
          key: key.key,
          project_id: project.project_id,
          item_id: null,
          session_id: input.sessionId,
        };
        return take(wanted, claim, sameSession);
      }
    }
  }

  async function takeSteeringSeat(input: { sessionId: string; project: string }): Promise<AcquireResult> {
    const project = await requireProject(db, input.project);
    const claim: NewClaimInput = {
      target_kind: 'steering',
      scope: { project_id: project.project_id },
      key: null,
      project_id: project.project_id,
      item_id: null,
      session_id: input.sessionId,
    };
    const wanted: Wanted = {
      kind: 'steering',
      label: `the steering seat of ${project.name}`,
      key: null,
      project: project.name,
    };
    return take(wanted, claim, (h) => h.session_id === input.sessionId);
  }

  async function takeItem(input: { sessionId: string; item: string }): Promise<AcquireResult> {
    const ref = parseItemRef(input.item);
    const item = await ensureItem(db, ref);
    const claim: NewClaimInput = {
      target_kind: 'item',
      scope: { item_id: item.item_id },
      key: null,
      project_id: item.project_id,
      item_id: item.item_id,
      session_id: input.sessionId,
    };
    const wanted: Wanted = { kind: 'item', label: `item ${item.item}`, key: null, project: null };
    return take(wanted, claim, (h) => h.session_id === input.sessionId);
  }

  const lockForRelease = lockClaimForRelease;
  const releaseServing = (trx: Transaction<Database>, claim: ClaimRow, mark: ReleaseMark, effects: LineEffects) =>
    releaseServingLine(trx, claim, mark, lifetimeMs, effects);

  /** Releases the acting session's own live claim found by `find`; refuses when there is none. */
  async function releaseOwn(
    sessionId: string,
    what: string,
    reason: string,
    find: (trx: Transaction<Database>) => Promise<number | undefined>,
  ): Promise<ClaimView> {
    const { value } = await withLine(async (trx, effects) => {
      const session = await requireLiveSession(trx, sessionId);
      const claimId = await find(trx);
      const claim = claimId === undefined ? undefined : await lockForRelease(trx, claimId);
      if (!claim || claim.released_at) {
        throw refusal('claim_not_held', `session ${sessionId} holds no live claim on ${what}`, {
          recovery: `list your claims with: yoke claims list --holder-session-id ${sessionId} --active-only`,
          details: { session_id: sessionId, target: what },
        });
      }
      await releaseServing(
        trx,
        claim,
        { reason, bySessionId: session.session_id, byActorId: session.actor_id },
        effects,
      );
      return claimView(trx, claim.claim_id);
    });
    return value;
  }

  async function releaseSteeringSeat(input: {
    sessionId: string;
    project: string;
    reason?: string;
  }): Promise<ClaimView> {
    return releaseOwn(
      input.sessionId,
      `the steering seat of ${input.project}`,
      input.reason ?? 'steering seat released',
      async (trx) => {
        const project = await requireProject(trx, input.project);
        const row = await trx
          .selectFrom('work_claims')
          .select('claim_id')
          .where('target_kind', '=', 'steering')
          .where('project_id', '=', project.project_id)
          .where('session_id', '=', input.sessionId)
          .where('released_at', 'is', null)
          .executeTakeFirst();
        return row?.claim_id;
      },
    );
  }

  async function releaseItem(input: { sessionId: string; item: string; reason?: string }): Promise<ClaimView> {
    const ref = parseItemRef(input.item);
    return releaseOwn(input.sessionId, `item ${input.item}`, input.reason ?? 'item released', async (trx) => {
      const item = await ensureItem(trx, ref);
      const row = await trx
        .selectFrom('work_claims')
        .select('claim_id')
        .where('target_kind', '=', 'item')
        .where('item_id', '=', item.item_id)
        .where('session_id', '=', input.sessionId)
        .where('released_at', 'is', null)
        .executeTakeFirst();
      return row?.claim_id;
    });
  }

  /**
   * C8/C11: the operator release. The acting session holds a live steering seat on the
   * holder's project and its actor has that project's claims.release; the
   * WARNOperatorLeaseRelease event is written before the release, and the operator's reason
   * stays on the claim row for good.
   */
  async function authorizeOperator(
    trx: Transaction<Database>,
    actingSessionId: string,
    holderProjectId: number,
    hookContext: boolean,
    what: string,
  ) {
    if (hookContext) {
      throw refusal('hook_context_refused', `an operator release of ${what} cannot run from a hook context`, {
        recovery: 'run the release yourself from a terminal, outside any agent hook (unset YOKE_HOOK_CONTEXT)',
        details: { target: what },
      });
    }
    const operator = await requireLiveSession(trx, actingSessionId);
    const project = await trx
      .selectFrom('projects')
      .selectAll()
      .where('project_id', '=', holderProjectId)
      .executeTakeFirstOrThrow();
    const seat = await trx
      .selectFrom('work_claims')
      .select('claim_id')
      .where('target_kind', '=', 'steering')
      .where('project_id', '=', holderProjectId)
      .where('session_id', '=', operator.session_id)
      .where('released_at', 'is', null)
      .executeTakeFirst();
    if (!seat) {
      throw refusal(
        'steering_seat_required',
        `session ${operator.session_id} holds no live steering seat on ${project.name}, the holder's project`,
        {
          recovery: `take the seat first: yoke claims steering take --project ${project.name} --session ${operator.session_id}`,
          details: { session_id: operator.session_id, project: project.name },
        },
      );
    }
    if (!(await hasPermission(trx, holderProjectId, operator.actor_id, CLAIMS_RELEASE))) {
      throw refusal('permission_denied', `actor ${operator.actor_id} lacks ${CLAIMS_RELEASE} on ${project.name}`, {
        recovery: `an owner grants it: yoke projects grant ${project.name} --actor ${operator.actor_id} --permission ${CLAIMS_RELEASE}`,
        details: { actor_id: operator.actor_id, project: project.name, permission: CLAIMS_RELEASE },
      });
    }
    return { operator, project };
  }

  async function writeOperatorRelease(
    trx: Transaction<Database>,
    claim: ClaimRow,
    operator: { session_id: string; actor_id: string },
    projectId: number,
    reason: string,
    effects: LineEffects,
  ) {
    const eventId = await recordEvent(trx, {
      event_type: OPERATOR_RELEASE_EVENT,
      project_id: projectId,
      session_id: operator.session_id,
      claim_id: claim.claim_id,
      payload: {
        key: claim.key,
        target_kind: claim.target_kind,
        sticky: isSticky(claim.target_kind),
        holder_session_id: claim.session_id,
        operator_session_id: operator.session_id,
        operator_actor_id: operator.actor_id,
        reason,
      },
    });
    await releaseServing(
      trx,
      claim,
      { reason, bySessionId: operator.session_id, byActorId: operator.actor_id },
      effects,
    );
    return { claim: await claimView(trx, claim.claim_id), operator_event_id: eventId };
  }

  function alreadyReleased(claim: ClaimRow) {
    return refusal(
      'claim_already_released',
      `claim ${claim.claim_id} was released at ${claim.released_at!.toISOString()} (${claim.release_reason})`,
      {
        recovery: 'nothing to do; list live holds with: yoke coordination-claim list --active-only',
        details: {
          claim_id: claim.claim_id,
          released_at: claim.released_at!.toISOString(),
          release_reason: claim.release_reason,
        },
      },
    );
  }

  function claimNotFound(claimId: number) {
    return refusal('claim_not_found', `no claim has id ${claimId}`, {
      recovery: 'find the claim id with: yoke coordination-claim list --active-only',
      details: { claim_id: claimId },
    });
  }

  /** A retried release finds its own earlier effect and answers the same (DESIGN.md principle 3). */
  function isOwnEarlierRelease(claim: ClaimRow, actingSessionId: string, reason: string): boolean {
    return (
      claim.released_at !== null && claim.released_by_session_id === actingSessionId && claim.release_reason === reason
    );
  }

  function releaseResult(
    value: { claim: ClaimView; operator_event_id: string | null },
    effects: LineEffects | undefined,
    warnings: string[],
  ): ReleaseResult {
    return { ...value, reservations: effects?.reservations ?? [], warnings };
  }

  async function operatorRelease(input: OperatorReleaseInput): Promise<ReleaseResult> {
    const key = parseOperatorKey(input.key);
    const reason = requireReason(input.reason);
    if (key.kind === 'deploy_serialization') throw deployLockRetired(key.key);
    // C8: QA_HOST keys are machine-scoped and ignore any project; every other key names its project.
    if (key.kind !== 'qa_admission' && !input.project) {
      throw usageError('project_required', `releasing ${key.key} needs --project P`, {
        recovery: `yoke coordination-claim release --project P --key ${key.key} --claim-id ${input.claimId} --holder-session-id ${input.holderSessionId} --reason R`,
        details: { key: key.key },
      });
    }
    let lineEffects: LineEffects | undefined;
    const { value, warnings } = await withLine(async (trx, effects) => {
      lineEffects = effects;
      const claim = await lockForRelease(trx, input.claimId);
      if (!claim) throw claimNotFound(input.claimId);
      if (claim.key !== key.key) {
        throw refusal(
          'claim_key_mismatch',
          `claim ${claim.claim_id} is ${claim.key ?? claim.target_kind}, not ${key.key}`,
          {
            recovery: `check the claim id with: yoke coordination-claim list --key ${key.key} --active-only`,
            details: { claim_id: claim.claim_id, key: claim.key, requested_key: key.key },
          },
        );
      }
      if (claim.session_id !== input.holderSessionId) {
        throw refusal(
          'holder_session_mismatch',
          `claim ${claim.claim_id} is held by session ${claim.session_id}, not ${input.holderSessionId}`,
          {
            recovery: 'review the row again and pass its holder with --holder-session-id',
            details: { claim_id: claim.claim_id, holder_session_id: claim.session_id, given: input.holderSessionId },
          },
        );
      }
      if (claim.released_at) {
        if (isOwnEarlierRelease(claim, input.actingSessionId, reason))
          return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
        throw alreadyReleased(claim);
      }
      if (key.kind !== 'qa_admission') {
        const project = await requireProject(trx, input.project!);
        if (claim.project_id !== project.project_id) {
          throw refusal(
            'claim_project_mismatch',
            `claim ${claim.claim_id} belongs to another project than ${project.name}`,
            {
              recovery: `name the holder's project with --project (see yoke coordination-claim list --key ${key.key})`,
              details: { claim_id: claim.claim_id, project: project.name },
            },
          );
        }
      }
      const holderProjectId = claim.project_id ?? (await sessionById(trx, claim.session_id))?.project_id ?? null;
      if (holderProjectId === null) {
        throw refusal(
          'holder_project_unknown',
          `claim ${claim.claim_id} and its session ${claim.session_id} name no project, so no steering seat can release it`,
          {
            recovery: `the holder releases it: yoke claims work release --claim-id ${claim.claim_id} --reason R`,
            details: { claim_id: claim.claim_id },
          },
        );
      }
      const { operator } = await authorizeOperator(
        trx,
        input.actingSessionId,
        holderProjectId,
        input.hookContext ?? false,
        key.key,
      );
      return writeOperatorRelease(trx, claim, operator, holderProjectId, reason, effects);
    });
    return releaseResult(value, lineEffects, warnings);
  }

  /**
   * C9/C12: release by claim id. The holder releases its own claim (a QA host after its run,
   * a pre-retirement DEPLOY: hold); anyone else goes through the operator rules.
   */
  async function releaseWorkClaim(input: WorkReleaseInput): Promise<ReleaseResult> {
    const reason = requireReason(input.reason);
    let lineEffects: LineEffects | undefined;
    const { value, warnings } = await withLine(async (trx, effects) => {
      lineEffects = effects;
      const claim = await lockForRelease(trx, input.claimId);
      if (!claim) throw claimNotFound(input.claimId);
      if (claim.released_at) {
        if (isOwnEarlierRelease(claim, input.actingSessionId, reason))
          return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
        throw alreadyReleased(claim);
      }
      if (claim.session_id === input.actingSessionId) {
        const holder = await requireLiveSession(trx, input.actingSessionId);
        await releaseServing(
          trx,
          claim,
          { reason, bySessionId: holder.session_id, byActorId: holder.actor_id },
          effects,
        );
        return { claim: await claimView(trx, claim.claim_id), operator_event_id: null };
      }
      const holderProjectId = claim.project_id ?? (await sessionById(trx, claim.session_id))?.project_id ?? null;
      if (holderProjectId === null) {
        throw refusal(
          'not_claim_holder',
          `claim ${claim.claim_id} is held by session ${claim.session_id}, not ${input.actingSessionId}`,
          {
            recovery: `act as the holder (--session ${claim.session_id})`,
            details: { claim_id: claim.claim_id, holder_session_id: claim.session_id },
          },
        );
      }
      const what = claim.key ?? `claim ${claim.claim_id}`;
      const { operator } = await authorizeOperator(
        trx,
        input.actingSessionId,
        holderProjectId,
        input.hookContext ?? false,
        what,
      );
      return writeOperatorRelease(trx, claim, operator, holderProjectId, reason, effects);
    });
    return releaseResult(value, lineEffects, warnings);
  }

  /** C7: QA_HOST keys are machine-scoped, so a project filter is ignored for them. */
  async function listCoordinationClaims(input: {
    key?: string;
    project?: string;
    activeOnly?: boolean;
  }): Promise<ClaimView[]> {
    const key = input.key ? parseOperatorKey(input.key) : undefined;
    const ignoreProject = key?.kind === 'qa_admission';
    const projectId =
      input.project && !ignoreProject ? (await requireProject(db, input.project)).project_id : undefined;
    return claimViews(db, { key: key?.key, projectId, kinds: OPERATOR_KEYED_KINDS, activeOnly: input.activeOnly });
  }

  async function listClaims(input: {
    sessionId?: string;
    project?: string;
    activeOnly?: boolean;
  }): Promise<ClaimView[]> {
    const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
    return claimViews(db, { sessionId: input.sessionId, projectId, activeOnly: input.activeOnly });
  }

  return {
    acquireCoordinationClaim,
    takeSteeringSeat,
    releaseSteeringSeat,
    takeItem,
    releaseItem,
    operatorRelease,
    releaseWorkClaim,
    listCoordinationClaims,
    listClaims,
  };
}

export type ClaimActivities = ReturnType<typeof claimActivities>;
