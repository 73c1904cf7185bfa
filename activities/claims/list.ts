import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { claimViews, type ClaimView } from '../../db/claims';
import { requireProject } from '../../db/projects';
import { OPERATOR_KEYED_KINDS } from '../../domain/claimKinds';
import { parseOperatorKey } from '../../domain/operatorKeys';

/** C7: QA_HOST keys are machine-scoped, so a project filter is ignored for them. */
export async function listCoordinationClaims(
  { db }: { db: Kysely<Database> },
  input: { key?: string; project?: string; activeOnly?: boolean },
): Promise<ClaimView[]> {
  const key = input.key ? parseOperatorKey(input.key) : undefined;
  const ignoreProject = key?.kind === 'qa_admission';
  const projectId = input.project && !ignoreProject ? (await requireProject(db, input.project)).project_id : undefined;
  return claimViews(db, { key: key?.key, projectId, kinds: OPERATOR_KEYED_KINDS, activeOnly: input.activeOnly });
}

export async function listClaims(
  { db }: { db: Kysely<Database> },
  input: { sessionId?: string; project?: string; activeOnly?: boolean },
): Promise<ClaimView[]> {
  const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
  return claimViews(db, { sessionId: input.sessionId, projectId, activeOnly: input.activeOnly });
}
