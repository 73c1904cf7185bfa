import { claimView, heartbeatClaim, heldUnseen, takeClaim, type ClaimView, type NewClaimInput } from '../../db/claims';
import { liveHolder } from '../../db/claimUnits';
import { ensureItemForTake, requireProject } from '../../db/projects';
import { requireLiveSession } from '../../db/sessions';
import { claimContended, deployLockRetired, heldRefusal, type Wanted } from '../../domain/claimRefusals';
import { refusal, usageError, YokeError } from '../../domain/errors';
import { refusalFromPostgres } from '../../domain/sqlRefusal';
import { formatItemRef, parseItemRef } from '../../domain/itemRef';
import { parseOperatorKey } from '../../domain/operatorKeys';
import { takeTestMachine } from '../testMachineTake';
import type { LineDeps } from '../waitingLine';
import type { AcquireResult, JoinRequest } from './acquireResult';

export interface AcquireCoordinationInput {
  sessionId: string;
  key: string;
  project?: string;
  item?: string;
  join?: JoinRequest;
  /** A verification or golden capture takes even an unhealthy machine, ahead of the line (W8). */
  bypassLine?: boolean;
}

type Holding = Pick<ClaimView, 'session_id' | 'item_id'>;

/**
 * Takes the claim in one statement when its unit is free, and refuses from that same
 * statement's holder view when another holds it; only a re-entry (or a holder gone by the
 * time we look) needs a short transaction. The unique partial index is the judge (C3); the
 * holder read only explains a loss.
 */
async function take(
  deps: LineDeps,
  wanted: Wanted,
  claim: NewClaimInput,
  mayReenter: (h: Holding) => boolean,
): Promise<AcquireResult> {
  const { db } = deps;
  for (let attempt = 0; attempt < 3; attempt++) {
    const seen = await takeClaim(db, claim);
    if (seen.taken) return { claim: seen.taken, reentered: false, consumed_reservation: false, warnings: [] };
    if (seen.sessionLive && seen.holder && !mayReenter(seen.holder)) throw heldRefusal(wanted, seen.holder);
    if (heldUnseen(seen) && attempt < 2) continue;
    let reentering: number | undefined;
    const outcome = await db
      .transaction()
      .execute(async (trx) => {
        await requireLiveSession(trx, claim.session_id);
        const holder = await liveHolder(trx, claim);
        if (!holder) return undefined; // released since our insert: try it again
        if (mayReenter(holder)) {
          reentering = holder.claim_id;
          await heartbeatClaim(trx, holder.claim_id);
          return {
            claim: await claimView(trx, holder.claim_id),
            reentered: true,
            consumed_reservation: false,
            warnings: [],
          };
        }
        throw heldRefusal(wanted, await claimView(trx, holder.claim_id));
      })
      .catch(async (err: unknown) => {
        // C4: the owning item re-enters from its own actor's sessions; another actor's session
        // (refused the heartbeat by Postgres) is told who holds it, as any other taker is
        const code = err instanceof YokeError ? err.code : refusalFromPostgres(err)?.code;
        if (reentering !== undefined && code === 'permission_denied')
          throw heldRefusal(wanted, await claimView(db, reentering));
        throw err;
      });
    if (outcome) return outcome;
  }
  throw claimContended(wanted);
}

export async function acquireCoordinationClaim(
  deps: LineDeps,
  input: AcquireCoordinationInput,
): Promise<AcquireResult> {
  const { db } = deps;
  const key = parseOperatorKey(input.key);
  if (key.kind === 'deploy_serialization') throw deployLockRetired(key.key);
  const wanted: Wanted = { kind: key.kind, label: key.key, key: key.key, project: input.project ?? null };
  const sameSession = (h: Holding) => h.session_id === input.sessionId;
  if (input.item !== undefined && key.kind !== 'migration_serialization') {
    // C2: only a migration hold is owned by an item; dropping --item silently would let a caller
    // believe the hold is the item's (the board's 🔒 KEY (PREFIX-N), C4's re-entry)
    throw usageError('invalid_argument', `--item: ${key.key} is owned by no item (only LIVE_DB_MIGRATION keys are)`, {
      recovery: `drop --item: yoke coordination-claim acquire --key ${key.key}${input.project ? ` --project ${input.project}` : ''}`,
      details: { option: '--item', key: key.key },
    });
  }
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
      return takeTestMachine(deps, wanted, claim, { join: input.join, bypassLine: input.bypassLine });
    }
    case 'migration_serialization': {
      if (!input.project || !input.item) {
        throw usageError('migration_owner_required', `${key.key} needs --project P and the owning --item PREFIX-N`, {
          recovery: `yoke coordination-claim acquire --key ${key.key} --project P --item PREFIX-N`,
          details: { key: key.key },
        });
      }
      const project = await requireProject(db, input.project);
      const ref = parseItemRef(input.item);
      // refused before the item is recorded: a prefix is its project's (ensureItem records it there)
      if (ref.prefix !== project.item_prefix) {
        const label = formatItemRef(ref);
        throw refusal('item_outside_project', `item ${label} does not belong to project ${project.name}`, {
          recovery: `name an item of ${project.name} (prefix ${project.item_prefix}-N)`,
          details: { item: label, project: project.name },
        });
      }
      const claimFor = (itemId: number | null): NewClaimInput => ({
        target_kind: 'migration_serialization',
        scope: { project_id: project.project_id, model: key.model, item_id: itemId },
        key: key.key,
        project_id: project.project_id,
        item_id: itemId,
        session_id: input.sessionId,
      });
      // The unit is (project, model): a hold of another item is refused before this item is
      // recorded, so a typo'd --item refused claim_held leaves no bare item behind (C1).
      await requireLiveSession(db, input.sessionId);
      const holder = await liveHolder(db, claimFor(null));
      if (holder) {
        const view = await claimView(db, holder.claim_id);
        if (view.item !== formatItemRef(ref)) throw heldRefusal(wanted, view);
      }
      const item = await ensureItemForTake(db, input.sessionId, ref);
      const claim = claimFor(item.item_id);
      // C4: the owning item re-enters and heartbeats its hold; any other item is refused.
      return take(deps, wanted, claim, (h) => h.item_id === item.item_id);
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
      return take(deps, wanted, claim, sameSession);
    }
  }
}

export async function takeSteeringSeat(
  deps: LineDeps,
  input: { sessionId: string; project: string },
): Promise<AcquireResult> {
  const project = await requireProject(deps.db, input.project);
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
  return take(deps, wanted, claim, (h) => h.session_id === input.sessionId);
}

export async function takeItem(deps: LineDeps, input: { sessionId: string; item: string }): Promise<AcquireResult> {
  const item = await ensureItemForTake(deps.db, input.sessionId, parseItemRef(input.item));
  const claim: NewClaimInput = {
    target_kind: 'item',
    scope: { item_id: item.item_id },
    key: null,
    project_id: item.project_id,
    item_id: item.item_id,
    session_id: input.sessionId,
  };
  const wanted: Wanted = { kind: 'item', label: `item ${item.item}`, key: null, project: null };
  return take(deps, wanted, claim, (h) => h.session_id === input.sessionId);
}
