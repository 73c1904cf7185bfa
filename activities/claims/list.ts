import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { claimViews, type ClaimView } from '../../db/claims';
import { requireProject } from '../../db/projects';
import { testMachineByName } from '../../db/testMachines';
import { OPERATOR_KEYED_KINDS } from '../../domain/claimKinds';
import { testMachineUnknown } from '../../domain/claimRefusals';
import { parseOperatorKey } from '../../domain/operatorKeys';

/**
 * C7: QA_HOST keys are machine-scoped, so a project filter is ignored for them.
 * C3: a QA_HOST key names a registered machine; a name that no machine has, and no claim ever
 * had (a removed machine keeps its history), is refused test_machine_unknown rather than
 * answered with an empty list that reads as "free".
 */
export async function listCoordinationClaims(
  { db }: { db: Kysely<Database> },
  input: { key?: string; project?: string; activeOnly?: boolean },
): Promise<ClaimView[]> {
  const key = input.key ? parseOperatorKey(input.key) : undefined;
  const ignoreProject = key?.kind === 'qa_admission';
  const projectId = input.project && !ignoreProject ? (await requireProject(db, input.project)).project_id : undefined;
  const rows = await claimViews(db, {
    key: key?.key,
    projectId,
    kinds: OPERATOR_KEYED_KINDS,
    activeOnly: input.activeOnly,
  });
  if (key?.kind === 'qa_admission' && rows.length === 0 && !(await testMachineByName(db, key.testMachine))) {
    const history = input.activeOnly ? await claimViews(db, { key: key.key, kinds: OPERATOR_KEYED_KINDS }) : rows;
    if (history.length === 0) throw testMachineUnknown(key.testMachine);
  }
  return rows;
}

export async function listClaims(
  { db }: { db: Kysely<Database> },
  input: { sessionId?: string; project?: string; activeOnly?: boolean },
): Promise<ClaimView[]> {
  const projectId = input.project ? (await requireProject(db, input.project)).project_id : undefined;
  return claimViews(db, { sessionId: input.sessionId, projectId, activeOnly: input.activeOnly });
}
