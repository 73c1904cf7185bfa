import type { Insertable, Selectable } from 'kysely';
import type { Database, DeployHostRow, EnvironmentRow, FlowRow, ItemQaCasesTable, QaPlansTable } from './database';
import type { Executor } from './pool';

/**
 * The declared parts of a project as `yoke apply` reads and writes them: environments, deploy
 * hosts, flows, QA plans, item obligations and dependencies. Each part is read by its name in
 * the project (so apply can say create, update or unchanged) and written as an upsert on that
 * name, so applying the same file twice changes nothing.
 */

/** The columns a declaration sets: everything but the keys it is named by. */
type Declared<T> = Omit<Insertable<T>, 'project_id' | 'name'>;

/** The parts of a project named by (project, name). */
type NamedPart = 'environments' | 'deploy_hosts' | 'flows';

export function declaredPart(
  db: Executor,
  table: 'environments',
  projectId: number,
  name: string,
): Promise<EnvironmentRow | undefined>;
export function declaredPart(
  db: Executor,
  table: 'deploy_hosts',
  projectId: number,
  name: string,
): Promise<DeployHostRow | undefined>;
export function declaredPart(
  db: Executor,
  table: 'flows',
  projectId: number,
  name: string,
): Promise<FlowRow | undefined>;
export async function declaredPart(
  db: Executor,
  table: NamedPart,
  projectId: number,
  name: string,
): Promise<Selectable<Database[NamedPart]> | undefined> {
  return db
    .selectFrom(table)
    .selectAll()
    .where('project_id', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
}

export async function upsertPart<T extends NamedPart>(
  db: Executor,
  table: T,
  projectId: number,
  name: string,
  row: Declared<Database[T]>,
): Promise<void> {
  await db
    .insertInto(table as NamedPart)
    .values({ project_id: projectId, name, ...row })
    .onConflict((oc) => oc.columns(['project_id', 'name']).doUpdateSet(row))
    .execute();
}

/** The completion flow moves in one step: every other flow of the project stops being it first. */
export async function clearCompletionFlowExcept(db: Executor, projectId: number, keep: string): Promise<void> {
  await db
    .updateTable('flows')
    .set({ completion_flow: false })
    .where('project_id', '=', projectId)
    .where('name', '!=', keep)
    .execute();
}

/** The names of every stored part of a project: what `apply` compares a file's declarations with. */
export async function storedPartNames(
  db: Executor,
  projectId: number,
): Promise<{ environment: string[]; host: string[]; flow: string[]; plan: string[] }> {
  const names = (table: NamedPart) =>
    db.selectFrom(table).select('name').where('project_id', '=', projectId).orderBy('name').execute();
  const [environment, host, flow, plan] = await Promise.all([
    names('environments'),
    names('deploy_hosts'),
    names('flows'),
    db
      .selectFrom('qa_plans')
      .select('plan_id as name')
      .where('project_id', '=', projectId)
      .orderBy('plan_id')
      .execute(),
  ]);
  const of = (rows: { name: string }[]) => rows.map((r) => r.name);
  return { environment: of(environment), host: of(host), flow: of(flow), plan: of(plan) };
}

/** The project's flow ids by flow name. */
export async function flowIdsByName(db: Executor, projectId: number): Promise<Map<string, number>> {
  const rows = await db.selectFrom('flows').select(['flow_id', 'name']).where('project_id', '=', projectId).execute();
  return new Map(rows.map((f) => [f.name, f.flow_id]));
}

export async function declaredPlan(
  db: Executor,
  projectId: number,
  planId: string,
): Promise<Selectable<QaPlansTable> | undefined> {
  return db
    .selectFrom('qa_plans')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('plan_id', '=', planId)
    .executeTakeFirst();
}

/** `definition` is the plan as JSON text. */
export async function upsertPlan(db: Executor, projectId: number, planId: string, definition: string): Promise<void> {
  await db
    .insertInto('qa_plans')
    .values({ project_id: projectId, plan_id: planId, definition })
    .onConflict((oc) => oc.columns(['project_id', 'plan_id']).doUpdateSet({ definition }))
    .execute();
}

/** An item's declared obligation (QA case) by its case key. */
export async function declaredObligation(
  db: Executor,
  itemId: number,
  caseKey: string,
): Promise<Selectable<ItemQaCasesTable> | undefined> {
  return db
    .selectFrom('item_qa_cases')
    .selectAll()
    .where('item_id', '=', itemId)
    .where('case_key', '=', caseKey)
    .executeTakeFirst();
}

export async function upsertObligation(
  db: Executor,
  itemId: number,
  caseKey: string,
  values: Omit<Insertable<ItemQaCasesTable>, 'item_id' | 'case_key'>,
): Promise<void> {
  await db
    .insertInto('item_qa_cases')
    .values({ item_id: itemId, case_key: caseKey, ...values })
    .onConflict((oc) => oc.columns(['item_id', 'case_key']).doUpdateSet(values))
    .execute();
}

/** D7: the declared dependencies replace the item's previous ones. */
export async function replaceDependencies(
  db: Executor,
  itemId: number,
  dependsOn: { itemId: number; environment: string }[],
): Promise<void> {
  await db.deleteFrom('item_dependencies').where('item_id', '=', itemId).execute();
  if (dependsOn.length === 0) return;
  await db
    .insertInto('item_dependencies')
    .values(dependsOn.map((d) => ({ item_id: itemId, depends_on_item_id: d.itemId, environment: d.environment })))
    .onConflict((oc) => oc.doNothing())
    .execute();
}
