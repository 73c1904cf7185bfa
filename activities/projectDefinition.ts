import { readFileSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Kysely, Transaction } from 'kysely';
import { LineCounter, parseDocument } from 'yaml';
import { requireAdmin } from '../db/actors';
import { missingCredential } from './hosts/ssh';
import type { Database } from '../db/database';
import { backlogItemByNumber, upsertDeclaredItem } from '../db/items';
import {
  clearCompletionFlowExcept,
  declaredObligation,
  declaredPart,
  declaredPlan,
  flowIdsByName,
  replaceDependencies,
  upsertObligation,
  storedPartNames,
  upsertPart,
  upsertPlan,
} from '../db/projectDefinition';
import {
  insertDeclaredProject,
  lockProjectDeclaration,
  projectByName,
  projectByPrefix,
  setProjectRepository,
  setProjectTracker,
} from '../db/projects';
import { stableJson } from '../domain/canonicalRequest';
import { usageError, YokeError } from '../domain/errors';
import { formatHostKey, parseHostKeyText } from '../domain/hostKeys';
import { defaultItemPrefix } from '../domain/itemRef';
import { occupancyUnit } from '../domain/origins';
import { formatPath, validateProjectDefinition, type ProjectDefinition } from '../domain/projectDefinition';

export interface Change {
  kind: 'project' | 'environment' | 'host' | 'flow' | 'plan' | 'item' | 'obligation';
  name: string;
  /** `kept`: stored, not in the file; apply never removes a part. */
  action: 'create' | 'update' | 'unchanged' | 'kept';
  /** An update's changed fields, as the file names them. */
  fields?: string[];
}

/** The fields whose stored value differs from the file's (compared as stable JSON). */
function differing<T extends Record<string, unknown>>(existing: Partial<T> | undefined, next: T): string[] {
  if (!existing) return [];
  return Object.keys(next).filter((k) => stableJson(existing[k] ?? null) !== stableJson(next[k] ?? null));
}

export interface ApplyResult {
  project: string;
  dry_run: boolean;
  changes: Change[];
  summary: Record<Change['action'], number>;
  /** A deploy host whose credential the worker's key directory lacks. */
  warnings: string[];
}

/** The default cap on a project definition file (YOKE_APPLY_MAX_BYTES). */
export const DEFAULT_APPLY_MAX_BYTES = 1024 * 1024;

interface Problem {
  path: string;
  line: number | null;
  message: string;
}

/**
 * Reads and validates a project definition file. Every problem is reported at once, each
 * with its path in the file and its line, so one edit fixes them all.
 */
export function readProjectDefinition(
  file: string,
  maxBytes: number = DEFAULT_APPLY_MAX_BYTES,
): { definition: ProjectDefinition; baseDir: string } {
  let text: string;
  try {
    // A definition is a few kilobytes; a huge one would cost minutes and gigabytes to parse.
    const size = statSync(file).size;
    if (size > maxBytes) {
      throw usageError(
        'project_definition_too_large',
        `--file ${file} is ${size} bytes; a project definition may be at most ${maxBytes} bytes`,
        {
          recovery: 'split the definition, or raise YOKE_APPLY_MAX_BYTES if it really is this large',
          details: { file, option: '--file', size_bytes: size, max_bytes: maxBytes },
        },
      );
    }
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if (err instanceof YokeError) throw err;
    throw usageError('project_definition_unreadable', `cannot read ${file}: ${(err as Error).message}`, {
      recovery: 'pass the path of a project definition, e.g. yoke apply -f examples/project.yaml',
      details: { file },
    });
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const lineOf = (offset: number | undefined) => (offset === undefined ? null : lines.linePos(offset).line);
  if (doc.errors.length) {
    const problems: Problem[] = doc.errors.map((e) => ({ path: '(yaml)', line: lineOf(e.pos[0]), message: e.message }));
    throw invalid(file, problems);
  }
  let document: unknown;
  try {
    // yaml refuses documents whose aliases expand past a bound (a "billion laughs" file)
    document = doc.toJS({ maxAliasCount: 1000 });
  } catch (err) {
    throw invalid(file, [{ path: '(yaml)', line: null, message: (err as Error).message }]);
  }
  const validated = validateProjectDefinition(document);
  if (!validated.definition) {
    // A missing key has no node: point at the nearest enclosing one that exists.
    const lineAt = (path: (string | number)[]): number | null => {
      for (let n = path.length; n >= 0; n--) {
        const node = doc.getIn(path.slice(0, n), true) as { range?: [number, number, number] } | undefined;
        if (node?.range) return lineOf(node.range[0]);
      }
      return null;
    };
    const problems = validated.issues.map((issue) => ({
      path: formatPath(issue.path),
      line: lineAt(issue.path as (string | number)[]),
      message: issue.message,
    }));
    throw invalid(file, problems);
  }
  return { definition: validated.definition, baseDir: dirname(resolve(file)) };
}

function invalid(file: string, problems: Problem[]) {
  const listed = problems.map((p) => `${file}${p.line ? `:${p.line}` : ''} ${p.path}: ${p.message}`).join('; ');
  return usageError('invalid_project_definition', `${problems.length} problem(s) in ${file}: ${listed}`, {
    recovery: 'fix each named path and apply again',
    details: { file, problems },
  });
}

export function projectDefinitionActivities(deps: {
  db: Kysely<Database>;
  maxBytes?: number;
  /** The worker's key directory: a deploy host whose credential it lacks is warned of (issue 10). */
  keyDir?: string;
}) {
  const { db } = deps;

  /** Idempotent: applying the same file twice changes nothing the second time. */
  async function applyProjectDefinition(input: { file: string; dryRun?: boolean }): Promise<ApplyResult> {
    const { definition: d, baseDir } = readProjectDefinition(input.file, deps.maxBytes);
    const hosts = d.hosts.map((h) => {
      const keyFile = resolve(baseDir, h.host_key_file);
      let text: string;
      try {
        text = readFileSync(keyFile, 'utf8');
      } catch (err) {
        throw usageError(
          'invalid_host_key_file',
          `host ${h.name}: cannot read host_key_file ${keyFile}: ${(err as Error).message}`,
          {
            recovery: "point host_key_file at the host's public key (relative to the definition file)",
            details: { host: h.name, file: keyFile },
          },
        );
      }
      return { ...h, host_key: formatHostKey(parseHostKeyText(text, keyFile)) };
    });
    // T3: stored absolute, so containment reads the same checkout whoever runs the takeover.
    const repository = d.repository ? resolve(baseDir, d.repository) : null;
    const changes: Change[] = [];
    const run = async (trx: Transaction<Database>) => {
      // Issue 13: declaring a project is an admin's, even when nothing would change.
      await requireAdmin(trx, `apply the project definition of ${d.project}`);
      const note = (kind: Change['kind'], name: string, existing: unknown, fields: string[]) =>
        changes.push(
          existing === undefined
            ? { kind, name, action: 'create' }
            : fields.length
              ? { kind, name, action: 'update', fields }
              : { kind, name, action: 'unchanged' },
        );

      const prefix = d.item_prefix ?? defaultItemPrefix(d.project);
      const tracker = d.tracker ? JSON.stringify(d.tracker) : null;
      // Idempotent under concurrency too: a second apply of the same file waits here and reads
      // what the first one wrote, never a duplicate-name failure from inserting it again.
      await lockProjectDeclaration(trx, { name: d.project, itemPrefix: prefix });
      let project = await projectByName(trx, d.project);
      // the project's own fields: a changed tracker or repository is a change to show (and apply)
      note(
        'project',
        d.project,
        project,
        differing(project && { tracker: project.tracker, repository: project.repository }, {
          tracker: d.tracker ?? null,
          repository,
        }),
      );
      if (project && project.item_prefix !== prefix) {
        throw usageError(
          'item_prefix_mismatch',
          `project ${d.project} already uses item prefix ${project.item_prefix}, the file says ${prefix}`,
          {
            recovery: `set item_prefix: ${project.item_prefix} in the file`,
            details: { project: d.project },
          },
        );
      }
      if (!project) {
        const owner = await projectByPrefix(trx, prefix);
        if (owner) {
          throw usageError('item_prefix_taken', `item_prefix ${prefix} already belongs to project ${owner.name}`, {
            recovery: `set another item_prefix in the file for project ${d.project}`,
            details: { field: 'item_prefix', item_prefix: prefix, project: owner.name },
          });
        }
      }
      project ??= input.dryRun
        ? undefined
        : await insertDeclaredProject(trx, { name: d.project, itemPrefix: prefix, tracker, repository });
      const projectId = project?.project_id ?? -1;
      if (project && !input.dryRun && stableJson(project.tracker) !== stableJson(d.tracker ?? null)) {
        await setProjectTracker(trx, projectId, tracker);
      }
      if (project && !input.dryRun && project.repository !== repository) {
        await setProjectRepository(trx, projectId, repository);
      }
      // read before the upserts: what the project has that the file leaves out
      const stored = project ? await storedPartNames(trx, project.project_id) : undefined;

      for (const e of d.environments) {
        const row = {
          url: e.url ?? null,
          preview_slug: e.preview_slug ?? null,
          tier: e.tier,
          served_revision_path: e.served_revision_path,
          occupancy_unit: occupancyUnit({
            url: e.url ?? null,
            preview_slug: e.preview_slug ?? null,
            project: d.project,
            name: e.name,
          }),
        };
        const existing = await declaredPart(trx, 'environments', projectId, e.name);
        const fields = differing(existing, {
          url: row.url,
          preview_slug: row.preview_slug,
          tier: row.tier,
          served_revision_path: row.served_revision_path,
        });
        const same = !!existing && fields.length === 0;
        note('environment', e.name, existing, fields);
        if (input.dryRun || same) continue;
        await upsertPart(trx, 'environments', projectId, e.name, row);
      }

      for (const h of hosts) {
        const row = {
          host: h.host,
          port: h.port,
          ssh_user: h.user,
          credential: h.credential,
          host_key: h.host_key,
        };
        const existing = await declaredPart(trx, 'deploy_hosts', projectId, h.name);
        const fields = differing(existing, row);
        const same = !!existing && fields.length === 0;
        note('host', h.name, existing, fields);
        if (input.dryRun || same) continue;
        await upsertPart(trx, 'deploy_hosts', projectId, h.name, row);
      }

      // The completion flow moves in one step: clear it first so the unique index holds.
      if (!input.dryRun && d.flows.some((f) => f.completion_flow)) {
        const next = d.flows.find((f) => f.completion_flow)!.name;
        await clearCompletionFlowExcept(trx, projectId, next);
      }
      for (const f of d.flows) {
        const row = {
          delivery_custody: f.delivery_custody,
          completion_flow: f.completion_flow,
          stages: JSON.stringify(f.stages),
        };
        const existing = await declaredPart(trx, 'flows', projectId, f.name);
        const fields = differing(existing, {
          delivery_custody: f.delivery_custody,
          completion_flow: f.completion_flow,
          stages: f.stages,
        });
        const same = !!existing && fields.length === 0;
        note('flow', f.name, existing, fields);
        if (input.dryRun || same) continue;
        await upsertPart(trx, 'flows', projectId, f.name, row);
      }

      const flowIds = await flowIdsByName(trx, projectId);
      const itemIds = new Map<string, number>();
      for (const plan of d.plans) {
        const existing = await declaredPlan(trx, projectId, plan.id);
        const same = !!existing && stableJson(existing.definition) === stableJson(plan);
        note('plan', plan.id, existing, same ? [] : ['definition']);
        if (input.dryRun || same) continue;
        await upsertPlan(trx, projectId, plan.id, JSON.stringify(plan));
      }

      for (const item of d.items) {
        const number = Number(item.id.split('-')[1]);
        const selected = {
          completion_flow_id: item.completion_flow ? (flowIds.get(item.completion_flow) ?? null) : null,
          tracker_issue: item.issue ?? null,
        };
        const existing = await backlogItemByNumber(trx, projectId, number);
        const fields = existing
          ? [
              ...(existing.title === (item.title ?? null) ? [] : ['title']),
              ...(existing.defined_in_project ? [] : ['declared']),
              ...(existing.completion_flow_id === selected.completion_flow_id ? [] : ['completion_flow']),
              ...(existing.tracker_issue === selected.tracker_issue ? [] : ['issue']),
            ]
          : [];
        note('item', item.id, existing, fields);
        const row = input.dryRun
          ? existing
          : await upsertDeclaredItem(trx, projectId, number, { title: item.title ?? null, ...selected });
        if (row) itemIds.set(item.id, row.item_id);
        for (const o of item.obligations) {
          const { case: caseKey, ...values } = o;
          // a dry run compares against the rows it would change, so unchanged ones read unchanged
          const current = row ? await declaredObligation(trx, row.item_id, caseKey) : undefined;
          const fields = current
            ? (Object.keys(values) as (keyof typeof values)[]).filter((k) => current[k] !== values[k])
            : [];
          const unchanged = !!current && fields.length === 0;
          note('obligation', `${item.id}/${caseKey}`, current, fields);
          if (unchanged || input.dryRun || !row) continue;
          await upsertObligation(trx, row.item_id, caseKey, values);
        }
      }
      // D7: the declared dependencies replace the item's previous ones.
      for (const item of input.dryRun ? [] : d.items) {
        await replaceDependencies(
          trx,
          itemIds.get(item.id)!,
          item.depends_on.map((dep) => ({ itemId: itemIds.get(dep.item)!, environment: dep.environment ?? '' })),
        );
      }
      // apply declares and never removes (runs, items and evidence name these parts): a part the
      // file leaves out is kept as it is, and said so, so a deletion from the file is not read as done
      if (stored) {
        const declared = {
          environment: d.environments.map((e) => e.name),
          host: hosts.map((h) => h.name),
          flow: d.flows.map((f) => f.name),
          plan: d.plans.map((p) => p.id),
        };
        for (const kind of ['environment', 'host', 'flow', 'plan'] as const)
          for (const name of stored[kind])
            if (!declared[kind].includes(name)) changes.push({ kind, name, action: 'kept' });
      }
    };
    await db.transaction().execute(run);
    const summary = { create: 0, update: 0, unchanged: 0, kept: 0 };
    for (const c of changes) summary[c.action]++;
    // said now, not first at a run's deploy stage (credential_unknown)
    const warnings = d.hosts.flatMap((h) => {
      const missing = deps.keyDir ? missingCredential(h.credential, deps.keyDir) : null;
      return missing
        ? [
            `host ${h.name}: ${missing}: a worker reading ${deps.keyDir} cannot deploy to it until it can (its deploy stages fail credential_unknown)`,
          ]
        : [];
    });
    return { project: d.project, dry_run: !!input.dryRun, changes, summary, warnings };
  }

  return { applyProjectDefinition };
}
