import type { Kysely, Transaction } from 'kysely';
import type { ClaimRow, Database } from '../db/database';
import {
  claimView,
  claimViews,
  heartbeatClaim,
  heldUnseen,
  insertClaimRow,
  takeClaim,
  releaseClaim,
  releasedBy,
  type ClaimView,
  type NewClaimInput,
} from '../db/claims';
import { liveHolder, ownLiveClaims } from '../db/claimUnits';
import { itemByRef } from '../db/items';
import { ensureItem, ensureItemForTake, projectById, requireProject, type ItemHandle } from '../db/projects';
import { requireLiveSession } from '../db/sessions';
import { heldRefusal, type Wanted } from '../domain/claimRefusals';
import { normalizePath, parseDocument, parseProcessKey, parseTask } from '../domain/claimTargets';
import { refusal, usageError } from '../domain/errors';
import { parseItemRef } from '../domain/itemRef';
import type { Executor } from '../db/pool';

export interface TakeResult {
  claim: ClaimView;
  /** The session already held it; its heartbeat was renewed. */
  reentered: boolean;
}

export interface PathTakeResult {
  claims: ClaimView[];
  /** The declared path total of this take: the number of distinct paths it names. */
  declared_paths: number;
  item: string | null;
  process_key: string | null;
  reentered_claim_ids: number[];
}

/**
 * Epic tasks, processes, path claims and strategy-document locks: the claim primitives the
 * board shows (B1), held like every other claim (C1): one row in work_claims, exclusive by
 * a unique partial index (C3), alive while the session heartbeats, released with a reason
 * and by whom, and liveness-bound (not sticky, C5): the sweep and the session's end free them.
 */

async function take(deps: PrimitiveDeps, wanted: Wanted, claim: NewClaimInput): Promise<TakeResult> {
  const { db } = deps;
  for (let attempt = 0; attempt < 3; attempt++) {
    const seen = await takeClaim(db, claim);
    if (seen.taken) return { claim: seen.taken, reentered: false };
    if (seen.sessionLive && seen.holder && seen.holder.session_id !== claim.session_id)
      throw heldRefusal(wanted, seen.holder);
    if (heldUnseen(seen) && attempt < 2) continue;
    const outcome = await db.transaction().execute(async (trx) => {
      await requireLiveSession(trx, claim.session_id);
      const holder = await liveHolder(trx, claim);
      if (!holder) return undefined; // released since our insert: try again
      if (holder.session_id !== claim.session_id) throw heldRefusal(wanted, await claimView(trx, holder.claim_id));
      await heartbeatClaim(trx, holder.claim_id);
      return { claim: await claimView(trx, holder.claim_id), reentered: true };
    });
    if (outcome) return outcome;
  }
  throw refusal('claim_contended', `${wanted.label} changed hands three times while being taken`, {
    recovery: 'run the same command again',
  });
}

/** Releases the session's own live claims found by `find`, with a reason; refuses when there is none. */
async function releaseOwn(
  deps: PrimitiveDeps,
  sessionId: string,
  what: string,
  reason: string,
  find: (trx: Transaction<Database>) => Promise<ClaimRow[]>,
): Promise<ClaimView[]> {
  const { db } = deps;
  return db.transaction().execute(async (trx) => {
    const session = await requireLiveSession(trx, sessionId);
    const rows = await find(trx);
    if (rows.length === 0) {
      throw refusal('claim_not_held', `session ${sessionId} holds no live claim on ${what}`, {
        recovery: `list your claims with: yoke claims list --holder-session-id ${sessionId} --active-only`,
        details: { session_id: sessionId, target: what },
      });
    }
    for (const r of rows) await releaseClaim(trx, r.claim_id, releasedBy(session, reason));
    return claimViews(trx, { claimIds: rows.map((r) => r.claim_id) });
  });
}

/** The project a claim is recorded on: --project, else the item's, else the session's. */
async function projectOf(
  trx: Executor,
  input: { sessionId: string; project?: string; item?: ItemHandle },
  what: string,
): Promise<{ project_id: number; name: string }> {
  if (input.project) {
    const p = await requireProject(trx, input.project);
    if (input.item && input.item.project_id !== p.project_id) {
      throw refusal('item_outside_project', `item ${input.item.item} does not belong to project ${p.name}`, {
        recovery: `name an item of ${p.name} (prefix ${p.item_prefix}-N), or leave out --project`,
        details: { item: input.item.item, project: p.name },
      });
    }
    return p;
  }
  const projectId = input.item?.project_id ?? (await requireLiveSession(trx, input.sessionId)).project_id;
  if (projectId === null) {
    throw usageError('project_required', `${what} belongs to a project, and none was named`, {
      recovery: 'pass --project P (or register the session with --project P)',
    });
  }
  return projectById(trx, projectId);
}

export async function takeEpicTask(
  deps: PrimitiveDeps,
  input: { sessionId: string; item: string; task: string },
): Promise<TakeResult> {
  const { db } = deps;
  const task = parseTask(input.task);
  const item = await ensureItemForTake(db, input.sessionId, parseItemRef(input.item));
  return take(
    deps,
    { kind: 'epic_task', label: `epic task ${item.item} ${task}`, key: null, project: null },
    {
      target_kind: 'epic_task',
      scope: { item_id: item.item_id, task },
      key: null,
      project_id: item.project_id,
      item_id: item.item_id,
      session_id: input.sessionId,
    },
  );
}

export async function releaseEpicTask(
  deps: PrimitiveDeps,
  input: { sessionId: string; item: string; task: string; reason?: string },
) {
  const task = parseTask(input.task);
  const ref = parseItemRef(input.item);
  const [claim] = await releaseOwn(
    deps,
    input.sessionId,
    `epic task ${input.item} ${task}`,
    input.reason ?? 'epic task released',
    async (trx) => {
      const item = await ensureItem(trx, ref);
      return ownLiveClaims(trx, input.sessionId, 'epic_task', { task }, item.item_id);
    },
  );
  return claim!;
}

export async function takeProcess(
  deps: PrimitiveDeps,
  input: { sessionId: string; processKey: string; project?: string },
): Promise<TakeResult> {
  const { db } = deps;
  const processKey = parseProcessKey(input.processKey);
  const project = await projectOf(db, input, `process ${processKey}`);
  return take(
    deps,
    { kind: 'process', label: `process ${processKey} of ${project.name}`, key: null, project: project.name },
    {
      target_kind: 'process',
      scope: { project_id: project.project_id, process_key: processKey },
      key: null,
      project_id: project.project_id,
      item_id: null,
      session_id: input.sessionId,
    },
  );
}

export async function releaseProcess(
  deps: PrimitiveDeps,
  input: { sessionId: string; processKey: string; project?: string; reason?: string },
) {
  const processKey = parseProcessKey(input.processKey);
  const [claim] = await releaseOwn(
    deps,
    input.sessionId,
    `process ${processKey}`,
    input.reason ?? 'process released',
    async (trx) => {
      const project = await projectOf(trx, input, `process ${processKey}`);
      return ownLiveClaims(trx, input.sessionId, 'process', {
        project_id: project.project_id,
        process_key: processKey,
      });
    },
  );
  return claim!;
}

/**
 * Takes every named path for the session, all or nothing: one transaction, paths in a
 * fixed order (so two overlapping takes cannot deadlock), each path exclusive per project
 * by its unique index. A path another session holds refuses the whole take, naming it.
 */
export async function takePaths(
  deps: PrimitiveDeps,
  input: {
    sessionId: string;
    paths: string[];
    item?: string;
    process?: string;
    project?: string;
  },
): Promise<PathTakeResult> {
  const { db } = deps;
  const paths = [...new Set(input.paths.map(normalizePath))].sort();
  if (paths.length === 0) {
    throw usageError('invalid_argument', 'PATH: name at least one path', {
      recovery: 'yoke claims path take src/a.ts src/b.ts --item PREFIX-N',
      details: { option: 'PATH' },
    });
  }
  if (input.item && input.process) {
    // a path claim is anchored to one thing: the board renders it on the item or on the process
    throw usageError('invalid_argument', '--item and --process: a path claim is for an item or a process, not both', {
      recovery: "give one of them: --item for an item's paths, --process for a process's",
      details: { option: '--process' },
    });
  }
  const processKey = input.process ? parseProcessKey(input.process) : null;
  const ref = input.item ? parseItemRef(input.item) : undefined;
  return db.transaction().execute(async (trx) => {
    await requireLiveSession(trx, input.sessionId);
    const item = ref ? await ensureItem(trx, ref) : undefined;
    const project = await projectOf(trx, { sessionId: input.sessionId, project: input.project, item }, 'a path claim');
    const ids: number[] = [];
    const reentered: number[] = [];
    for (const path of paths) {
      const claim: NewClaimInput = {
        target_kind: 'path_claim',
        scope: { project_id: project.project_id, path, ...(processKey ? { process_key: processKey } : {}) },
        key: null,
        project_id: project.project_id,
        item_id: item?.item_id ?? null,
        session_id: input.sessionId,
      };
      const inserted = await insertClaimRow(trx, claim);
      if (inserted) {
        ids.push(inserted.claim_id);
        continue;
      }
      const holder = await liveHolder(trx, claim);
      // Re-entry is the same session taking the same path for the same anchor; one it holds for
      // another item or process stays that one's, and is refused as any held path is.
      const sameAnchor =
        holder?.item_id === (item?.item_id ?? null) &&
        ((holder?.scope as { process_key?: string } | undefined)?.process_key ?? null) === processKey;
      if (holder && holder.session_id === input.sessionId && sameAnchor) {
        await heartbeatClaim(trx, holder.claim_id);
        ids.push(holder.claim_id);
        reentered.push(holder.claim_id);
        continue;
      }
      const wanted: Wanted = {
        kind: 'path_claim',
        label: `path ${path} of ${project.name}`,
        key: null,
        project: project.name,
      };
      if (holder) throw heldRefusal(wanted, await claimView(trx, holder.claim_id));
      throw refusal('claim_contended', `path ${path} changed hands while being taken`, {
        recovery: 'run the same command again',
      });
    }
    return {
      claims: await claimViews(trx, { claimIds: ids }),
      declared_paths: paths.length,
      item: item?.item ?? null,
      process_key: processKey,
      reentered_claim_ids: reentered,
    };
  });
}

export async function releasePaths(
  deps: PrimitiveDeps,
  input: {
    sessionId: string;
    paths: string[];
    item?: string;
    project?: string;
    reason?: string;
  },
): Promise<ClaimView[]> {
  const paths = [...new Set(input.paths.map(normalizePath))].sort();
  const ref = input.item ? parseItemRef(input.item) : undefined;
  return releaseOwn(
    deps,
    input.sessionId,
    `paths ${paths.join(', ')}`,
    input.reason ?? 'paths released',
    async (trx) => {
      const item = ref ? await ensureItem(trx, ref) : undefined;
      const project = await projectOf(
        trx,
        { sessionId: input.sessionId, project: input.project, item },
        'a path claim',
      );
      const rows: ClaimRow[] = [];
      const notHeld: string[] = [];
      for (const path of paths) {
        const held = await ownLiveClaims(
          trx,
          input.sessionId,
          'path_claim',
          { project_id: project.project_id, path },
          item?.item_id,
        );
        if (!held.length) notHeld.push(path);
        rows.push(...held);
      }
      // All or nothing, as taking them is: a path not held (a typo) never reads as released
      // alongside the rest, which would leave the path meant still held behind an exit 0.
      if (notHeld.length && rows.length) {
        throw refusal(
          'claim_not_held',
          `session ${input.sessionId} holds no live claim on paths ${notHeld.join(', ')}; nothing was released`,
          {
            recovery: `release only paths you hold (see yoke claims list --holder-session-id ${input.sessionId} --active-only)`,
            details: { session_id: input.sessionId, target: `paths ${notHeld.join(', ')}`, not_held: notHeld },
          },
        );
      }
      return rows;
    },
  );
}

/** Per-file detail the board leaves out (B8): the path claims of an item or project. */
export async function listPathClaims(
  deps: PrimitiveDeps,
  input: { item?: string; project?: string; activeOnly?: boolean },
) {
  const { db } = deps;
  // A list only reads: an item nobody recorded (a typo) is refused item_unknown, never
  // created as a side effect (it then showed in items list and frontier) and listed as empty.
  const item = input.item ? await itemByRef(db, parseItemRef(input.item)) : undefined;
  const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
  const rows = await claimViews(db, { kinds: ['path_claim'], projectId, activeOnly: input.activeOnly });
  return rows
    .filter((r) => !item || r.item_id === item.item_id)
    .map((r) => ({
      ...r,
      path: String(r.scope.path),
      process_key: (r.scope.process_key as string | undefined) ?? null,
    }));
}

export async function lockDocument(
  deps: PrimitiveDeps,
  input: { sessionId: string; document: string; project: string },
): Promise<TakeResult> {
  const { db } = deps;
  const document = parseDocument(input.document);
  const project = await requireProject(db, input.project);
  return take(
    deps,
    {
      kind: 'strategy_doc_claim',
      label: `document ${document} of ${project.name}`,
      key: null,
      project: project.name,
    },
    {
      target_kind: 'strategy_doc_claim',
      scope: { project_id: project.project_id, document },
      key: null,
      project_id: project.project_id,
      item_id: null,
      session_id: input.sessionId,
    },
  );
}

export async function unlockDocument(
  deps: PrimitiveDeps,
  input: { sessionId: string; document: string; project: string; reason?: string },
) {
  const document = parseDocument(input.document);
  const [claim] = await releaseOwn(
    deps,
    input.sessionId,
    `document ${document} of ${input.project}`,
    input.reason ?? 'document unlocked',
    async (trx) => {
      const project = await requireProject(trx, input.project);
      return ownLiveClaims(trx, input.sessionId, 'strategy_doc_claim', { project_id: project.project_id, document });
    },
  );
  return claim!;
}

/** The claim primitives' one dependency: the store. */
interface PrimitiveDeps {
  db: Kysely<Database>;
}

/**
 * Epic tasks, processes, path claims and strategy-document locks: the claim primitives the
 * board shows (B1). Each operation is a top-level `(deps, input)` function; this binds them.
 */
export function claimPrimitiveActivities(deps: PrimitiveDeps) {
  const bound =
    <I, O>(operation: (deps: PrimitiveDeps, input: I) => Promise<O>) =>
    (input: I) =>
      operation(deps, input);
  return {
    takeEpicTask: bound(takeEpicTask),
    releaseEpicTask: bound(releaseEpicTask),
    takeProcess: bound(takeProcess),
    releaseProcess: bound(releaseProcess),
    takePaths: bound(takePaths),
    releasePaths: bound(releasePaths),
    listPathClaims: bound(listPathClaims),
    lockDocument: bound(lockDocument),
    unlockDocument: bound(unlockDocument),
  };
}

export type ClaimPrimitiveActivities = ReturnType<typeof claimPrimitiveActivities>;
