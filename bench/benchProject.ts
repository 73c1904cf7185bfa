import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { stringify } from 'yaml';
import { projectDefinitionActivities } from '../activities/projectDefinition';
import { sessionActivities } from '../activities/sessions';
import type { Database } from '../db/database';

/**
 * A bench's world: its project definition applied through the ordinary path (a file, as an
 * operator would), and the one session `bench` that acts in it (of `project` when given).
 */
export async function applyBenchProject(
  db: Kysely<Database>,
  definition: Record<string, unknown>,
  session: { project?: string } = {},
): Promise<void> {
  const file = join(mkdtempSync(join(tmpdir(), 'yoke-bench-')), 'project.yaml');
  writeFileSync(file, stringify(definition));
  await projectDefinitionActivities({ db }).applyProjectDefinition({ file });
  await sessionActivities({ db }).registerSession({ sessionId: 'bench', actorId: 'bench', ...session });
}

/**
 * Runs of several sizes side by side (Q5, T2 benches and their tests): one environment and one
 * flow `flow-N` per size N on `env-N`, and N items of its own for the run of that size,
 * numbered after those of the smaller sizes, each owing a post-deploy e2e obligation. A flow's
 * stages: an item QA stage with the plan `accept`, a run QA stage with the check `smoke`, and
 * the deploy `go`, first or last as the bench needs.
 */
export function qaFleetDefinition(
  sizes: number[],
  options: { deploy: 'first' | 'last'; repository?: string },
): Record<string, unknown> {
  const qa = (target: string) => [
    { name: 'item-qa', kind: 'qa', target, scope: 'item', checks: [{ name: 'accept', plan: 'accept' }] },
    { name: 'run-qa', kind: 'qa', target, scope: 'run', checks: [{ name: 'smoke' }] },
  ];
  const go = (target: string) => ({ name: 'go', kind: 'auto', target });
  return {
    project: 'bench',
    item_prefix: 'B',
    ...(options.repository ? { repository: options.repository } : {}),
    environments: sizes.map((n) => ({ name: `env-${n}`, url: `http://env-${n}.bench.test`, tier: 'stage' })),
    plans: [{ id: 'accept', cases: [{ name: 'look', manual: { instructions: 'look' } }] }],
    flows: sizes.map((n) => ({
      name: `flow-${n}`,
      delivery_custody: true,
      stages: options.deploy === 'first' ? [go(`env-${n}`), ...qa(`env-${n}`)] : [...qa(`env-${n}`), go(`env-${n}`)],
    })),
    // Each run's members complete on that run's flow (its own items), so the runs can close them.
    items: sizes.flatMap((n) =>
      fleetItems(sizes, n).map((id) => ({
        id,
        completion_flow: `flow-${n}`,
        obligations: [{ case: 'e2e', qa_phase: 'post_deploy', target_env: null }],
      })),
    ),
  };
}

/** The items of the fleet's run of size n: numbered after those of the smaller sizes. */
export function fleetItems(sizes: number[], n: number): string[] {
  const offset = sizes.filter((m) => m < n).reduce((a, b) => a + b, 0);
  return Array.from({ length: n }, (_, i) => `B-${offset + i + 1}`);
}
