import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import { itemByRef, type ItemRow } from '../db/items';
import {
  artifactsOfRun,
  insertArtifact,
  storedMembership,
  type ArtifactRow,
  type StoredMembership,
} from '../db/memberships';
import type { Executor } from '../db/pool';
import { flowById, obligationsOf, runById } from '../db/runs';
import { requireLiveSession } from '../db/sessions';
import { requirementId, type Obligation } from '../domain/admission';
import { ARTIFACT_MAX_BYTES, ArtifactName } from '../domain/artifacts';
import { refusal, usageError } from '../domain/errors';
import { parseItemRef } from '../domain/itemRef';
import { isTerminalRunStatus } from '../domain/runStatuses';
import { selectedObligations, selectionOf } from './runs/membership';

/**
 * C10: requirement reads and artifact uploads by a run member act under the project stored on
 * its membership record, and keep that authority after the membership ends (the member was
 * removed, a takeover moved it to a successor, or the run is terminal). Naming a run the item
 * was never a member of is refused run_member_unknown.
 */

export interface MembershipView {
  run_id: string;
  run_status: string;
  /** The stored member's project: what the read or upload acts under. */
  project: string;
  admitted_at: string;
  /** false while the item is a member of a run still in progress. */
  ended: boolean;
  ended_by: 'removed' | 'superseded' | 'run_terminal' | null;
  ended_at: string | null;
  later_run_id: string | null;
  delivery_intent: 'progress' | 'final' | null;
}

export interface RequirementView extends Pick<
  Obligation,
  'qa_phase' | 'target_env' | 'plan_id' | 'blocking' | 'waived' | 'superseded'
> {
  requirement_id: string;
  case: string;
  bound_run_id: string | null;
  /** With --run: whether the member's requirement selection names it; null without a run. */
  selected: boolean | null;
}

export interface RequirementsView {
  item: string;
  title: string | null;
  project: string;
  run_id: string | null;
  membership: MembershipView | null;
  requirement_selection: string[] | null;
  /** true when the member stored no selection and the list is derived from its obligations now (D5). */
  selection_derived: boolean | null;
  requirements: RequirementView[];
}

export interface ArtifactView extends Omit<ArtifactRow, 'uploaded_at'> {
  uploaded_at: string;
}

function membershipView(m: StoredMembership): MembershipView {
  const terminal = m.ended_at === null && isTerminalRunStatus(m.run_status);
  const endedAt = m.ended_at ?? (terminal ? m.run_terminal_at : null);
  return {
    run_id: m.run_id,
    run_status: m.run_status,
    project: m.project,
    admitted_at: m.admitted_at.toISOString(),
    ended: m.ended_at !== null || terminal,
    ended_by: m.ended_by ?? (terminal ? 'run_terminal' : null),
    ended_at: endedAt?.toISOString() ?? null,
    later_run_id: m.later_run_id,
    delivery_intent: m.delivery_intent,
  };
}

const artifactView = (a: ArtifactRow): ArtifactView => ({ ...a, uploaded_at: a.uploaded_at.toISOString() });

export function memberAuthorityActivities(deps: { db: Kysely<Database> }) {
  const { db } = deps;

  /** The stored member of (run, item), ended or not; refused if the item never was one. */
  async function requireStoredMember(executor: Executor, runId: string, item: ItemRow): Promise<StoredMembership> {
    const m = await storedMembership(executor, runId, item.item_id);
    if (m) return m;
    const run = await runById(executor, runId); // an unknown run is named as such (run_not_found)
    // an ended run takes no new members, so only a live one is offered to add it to
    const addIt = isTerminalRunStatus(run.status)
      ? ''
      : `, or add it: yoke deployment-runs add-item ${runId} ${item.item}`;
    throw refusal('run_member_unknown', `item ${item.item} was never a member of run ${runId}`, {
      recovery: `name a run ${item.item} is or was a member of (yoke items get ${item.item})${addIt}`,
      details: { run_id: runId, item: item.item },
    });
  }

  /**
   * `yoke items requirements ITEM [--run RUN]`: the item's QA obligations; with a run, read
   * through that run's stored member: its project and the selection it has (or ended with).
   */
  async function readRequirements(input: { item: string; runId?: string }): Promise<RequirementsView> {
    const item = await itemByRef(db, parseItemRef(input.item));
    const member = input.runId ? await requireStoredMember(db, input.runId, item) : undefined;
    const obligations = await obligationsOf(db, [item.item_id]);
    let selection: string[] | null = null;
    let picked: Set<(typeof obligations)[number]> | null = null;
    if (member) {
      const flow = await flowById(db, member.run_flow_id);
      selection = await selectionOf(db, flow, item, member.requirement_selection);
      picked = new Set(selectedObligations(item, obligations, selection));
    }
    return {
      item: item.item,
      title: item.title,
      project: member?.project ?? item.project,
      run_id: member?.run_id ?? null,
      membership: member ? membershipView(member) : null,
      requirement_selection: selection,
      selection_derived: member ? member.requirement_selection === null : null,
      requirements: obligations.map((o) => ({
        requirement_id: requirementId(item.item, o.case_key),
        case: o.case_key,
        qa_phase: o.qa_phase,
        target_env: o.target_env,
        plan_id: o.plan_id,
        blocking: o.blocking,
        waived: o.waived,
        superseded: o.superseded,
        bound_run_id: o.run_id,
        selected: picked ? picked.has(o) : null,
      })),
    };
  }

  /**
   * `yoke deployment-runs artifacts upload RUN --item ITEM --file PATH`: stored under the
   * stored member's project, with its sha256 and size; the same content under the same name
   * is the artifact already stored (replayed).
   */
  async function uploadArtifact(input: {
    sessionId: string;
    runId: string;
    item: string;
    name: string;
    content: Buffer;
  }): Promise<{ artifact: ArtifactView; membership: MembershipView; replayed: boolean }> {
    const name = ArtifactName.safeParse(input.name);
    if (!name.success) {
      throw usageError('invalid_artifact_name', `artifact name "${input.name}": ${name.error.issues[0]!.message}`, {
        recovery: 'pass --name with a plain file name (letters, digits, dots, dashes)',
        details: { name: input.name },
      });
    }
    if (input.content.length > ARTIFACT_MAX_BYTES) throw artifactTooLarge(input.name, input.content.length);
    return db.transaction().execute(async (trx) => {
      await requireLiveSession(trx, input.sessionId);
      const item = await itemByRef(trx, parseItemRef(input.item));
      const member = await requireStoredMember(trx, input.runId, item);
      const { artifact, replayed } = await insertArtifact(trx, {
        runId: member.run_id,
        itemId: item.item_id,
        name: name.data,
        content: input.content,
        sessionId: input.sessionId,
      });
      return { artifact: artifactView(artifact), membership: membershipView(member), replayed };
    });
  }

  /** `yoke deployment-runs artifacts list RUN`: every member's artifacts, oldest first (no content). */
  async function listArtifacts(input: { runId: string }): Promise<ArtifactView[]> {
    await runById(db, input.runId);
    return (await artifactsOfRun(db, input.runId)).map(artifactView);
  }

  return { readRequirements, uploadArtifact, listArtifacts };
}

/** C10: a file past the stored bound is refused before it is read or sent. */
export function artifactTooLarge(name: string, size: number) {
  return refusal(
    'artifact_too_large',
    `artifact ${name} is ${size} bytes; artifacts are stored in Postgres up to ${ARTIFACT_MAX_BYTES} bytes`,
    {
      recovery: `upload a smaller file (compress it, or keep an excerpt) of at most ${ARTIFACT_MAX_BYTES} bytes`,
      details: { name, size_bytes: size, max_bytes: ARTIFACT_MAX_BYTES },
    },
  );
}

export type MemberAuthorityActivities = ReturnType<typeof memberAuthorityActivities>;
