import { z } from 'zod';
import { CREDENTIAL_RECOVERY, CredentialName } from './credentials';
import { testMachineName } from './testMachineName';

/**
 * The declarative project definition `yoke apply -f project.yaml` reads: environments,
 * deploy hosts, flows of stages, backlog items and their QA obligations. Parsed once at the
 * edge; every problem is reported with its path in the file.
 */
/** Run cross-field checks even when another field already failed, so every problem is reported at once. */
const always = () => true;

const Name = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'use letters, digits, . _ - (up to 64)');
/** C3: a plan names its machine in any case; it is stored in the one spelling the machine has. */
const MachineName = Name.transform(testMachineName);
/**
 * A host name or address an SSH client is given: never an option (`-oProxyCommand=...`
 * would be read as one), no spaces or control characters.
 */
export const HostAddress = z
  .string()
  .regex(
    /^[A-Za-z0-9_.:[\]][A-Za-z0-9_.:[\]-]{0,252}$/,
    'expected a host name or address: letters, digits and . _ : [ ] -, not empty, no spaces, not starting with "-"',
  );

/** An SSH login name: what a POSIX user name may hold, never spaces or a leading '-'. */
export const SshUser = z
  .string()
  .regex(
    /^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$/,
    'expected a user name: letters, digits and . _ @ -, not empty, no spaces, not starting with "-"',
  );

/** Deployment targets and environments are web origins: http or https, nothing else. */
export const WebUrl = z
  .string()
  .url()
  .refine((u) => /^https?:\/\//i.test(u), 'use an http:// or https:// url');

const ItemId = z.string().regex(/^[A-Z][A-Z0-9]{0,15}-[1-9][0-9]{0,8}$/, 'an item is PREFIX-N, e.g. WEB-12');

export const Environment = z
  .object({
    name: Name,
    url: WebUrl.optional(),
    preview_slug: Name.optional(),
    tier: z.enum(['preview', 'dev', 'stage', 'production']),
    /** Q1/Q2: the path on `url` that answers the commit the environment serves. */
    served_revision_path: z.string().startsWith('/', 'a path starting with /').default('/revision'),
  })
  .strict()
  .refine((e) => e?.url !== undefined || e?.preview_slug !== undefined, {
    message: 'give a url, or a preview_slug for a preview without one',
    when: always,
  });

export const DeployHost = z
  .object({
    name: Name,
    host: HostAddress,
    port: z.number().int().min(1).max(65535).default(22),
    user: SshUser,
    /** Issue 13: the worker's key (a file name in its YOKE_SSH_KEY_DIR); no path is read from a definition. */
    credential: CredentialName,
    /** Refused with the way to the credential (kept in the schema to name the fix, not to be read). */
    identity_file: z.unknown().optional(),
    host_key_file: z.string().min(1),
  })
  .strict()
  .superRefine(
    (h, ctx) => {
      if (h.identity_file !== undefined)
        ctx.addIssue({
          code: 'custom',
          path: ['identity_file'],
          message: `the worker no longer reads a key path: name a key in its YOKE_SSH_KEY_DIR instead (credential: NAME; ${CREDENTIAL_RECOVERY})`,
        });
    },
    { when: always },
  );

export const DeployAction = z.union([
  z.object({ ssh: z.object({ host: Name, command: z.string().min(1) }).strict() }).strict(),
  z
    .object({
      http: z
        .object({
          method: z.enum(['GET', 'POST', 'PUT']).default('POST'),
          url: WebUrl,
          expect_status: z.number().int().min(100).max(599).default(200),
          body: z.string().optional(),
        })
        .strict(),
    })
    .strict(),
]);

export const Stage = z
  .object({
    name: Name,
    kind: z.enum(['deploy', 'qa', 'approval', 'auto']),
    target: Name,
    scope: z.enum(['item', 'run']).optional(),
    action: DeployAction.optional(),
    checks: z
      .array(z.object({ name: Name, blocking: z.boolean().default(true), plan: Name.optional() }).strict())
      .default([]),
  })
  .strict()
  .superRefine(
    (s, ctx) => {
      s.checks ??= [];
      if (s.kind === 'deploy' && !s.action)
        ctx.addIssue({ code: 'custom', path: ['action'], message: 'a deploy stage needs an action (ssh or http)' });
      if (s.kind !== 'deploy' && s.action)
        ctx.addIssue({ code: 'custom', path: ['action'], message: `only deploy stages take an action, not ${s.kind}` });
      if (s.kind === 'qa' && !s.scope)
        ctx.addIssue({ code: 'custom', path: ['scope'], message: 'a qa stage needs scope: item or run' });
      if (s.kind !== 'qa' && s.scope)
        ctx.addIssue({ code: 'custom', path: ['scope'], message: 'only qa stages take a scope' });
      if (s.kind !== 'qa' && s.checks.length)
        ctx.addIssue({ code: 'custom', path: ['checks'], message: 'only qa stages take checks' });
    },
    { when: always },
  );

/**
 * A QA plan: ordered cases, each automatic (a command over SSH on a named test machine that
 * passes with the given exit status) or manual (a human verdict), with an optional host-reset
 * step and human gate that come before the cases.
 */
export const PlanCase = z
  .object({
    name: Name,
    automatic: z
      .object({
        test_machine: MachineName,
        command: z.string().min(1),
        pass_exit_status: z.number().int().min(0).max(255).default(0),
      })
      .strict()
      .optional(),
    manual: z
      .object({ instructions: z.string().default('') })
      .strict()
      .optional(),
  })
  .strict()
  .superRefine(
    (c, ctx) => {
      if (!c.automatic === !c.manual)
        ctx.addIssue({ code: 'custom', path: [], message: 'a case is either automatic or manual (exactly one)' });
    },
    { when: always },
  );

export const Plan = z
  .object({
    id: Name,
    title: z.string().optional(),
    host_reset: z
      .object({ test_machine: MachineName, command: z.string().min(1) })
      .strict()
      .optional(),
    gate: z
      .object({ prompt: z.string().min(1) })
      .strict()
      .optional(),
    cases: z.array(PlanCase).min(1, 'a plan needs at least one case'),
  })
  .strict();

export type QaPlanDefinition = z.infer<typeof Plan>;

export const Flow = z
  .object({
    name: Name,
    delivery_custody: z.boolean().default(false),
    completion_flow: z.boolean().default(false),
    stages: z.array(Stage).min(1, 'a flow needs at least one stage'),
  })
  .strict();

export const Obligation = z
  .object({
    case: Name,
    qa_phase: z.enum(['pre_merge', 'post_deploy']),
    target_env: Name.nullable().default(null),
    plan_id: z.string().min(1).nullable().default(null),
    blocking: z.boolean().default(true),
    waived: z.boolean().default(false),
    superseded: z.boolean().default(false),
  })
  .strict();

/** D7: an item this one depends on; with an environment, it must also have been delivered there. */
export const Dependency = z.object({ item: ItemId, environment: Name.optional() }).strict();

export const Item = z
  .object({
    id: ItemId,
    title: z.string().optional(),
    obligations: z.array(Obligation).default([]),
    /** D8: the item's selected completion flow (default: the project's completion flow). */
    completion_flow: Name.optional(),
    /** S3: the tracker issue the effects phase closes when the item is delivered. */
    issue: z.number().int().positive().optional(),
    depends_on: z.array(Dependency).default([]),
  })
  .strict();

/**
 * S3: where the effects phase syncs delivered items. GitHub: the repository's issues, through
 * its REST API (api_url for GitHub Enterprise or a test server), with a token read from the
 * worker's environment variable token_env. No tracker means the no-op tracker.
 */
export const Tracker = z
  .object({
    github: z
      .object({
        owner: z.string().min(1),
        repo: z.string().min(1),
        api_url: z.string().url().optional(),
        token_env: z
          .string()
          .regex(/^[A-Z_][A-Z0-9_]*$/)
          .default('GITHUB_TOKEN'),
      })
      .strict(),
  })
  .strict();
export type TrackerConfig = z.infer<typeof Tracker>;

export const ProjectDefinition = z
  .object({
    project: Name,
    item_prefix: z
      .string()
      .regex(/^[A-Z][A-Z0-9]{0,15}$/)
      .optional(),
    environments: z.array(Environment).default([]),
    hosts: z.array(DeployHost).default([]),
    flows: z.array(Flow).default([]),
    plans: z.array(Plan).default([]),
    items: z.array(Item).default([]),
    tracker: Tracker.optional(),
    /**
     * T3: the project's git repository, a local checkout (relative to the definition file):
     * takeover reads whether a successor's candidate contains its predecessor's there.
     */
    repository: z.string().min(1).optional(),
  })
  .strict();

export type ProjectDefinition = z.infer<typeof ProjectDefinition>;

export interface DefinitionIssue {
  path: PropertyKey[];
  message: string;
}

/**
 * Cross-references (names unique, stage targets and ssh hosts declared, one completion
 * flow, item prefixes, obligation environments). Run on the raw document beside the
 * structural parse, so a file with both kinds of problems gets every one reported at once.
 */
export function crossReferenceIssues(document: unknown): DefinitionIssue[] {
  const issues: DefinitionIssue[] = [];
  const raw = (document && typeof document === 'object' ? document : {}) as Partial<ProjectDefinition>;
  // Runs even when parts failed to parse (every problem at once), so it reads defensively.
  const list = <T>(x: T[] | undefined): T[] => (Array.isArray(x) ? x.filter((v) => v && typeof v === 'object') : []);
  const d = {
    ...raw,
    environments: list(raw.environments),
    hosts: list(raw.hosts),
    items: list(raw.items).map((i) => ({ ...i, obligations: list(i.obligations) })),
    flows: list(raw.flows).map((f) => ({
      ...f,
      stages: list(f.stages).map((s) => ({ ...s, checks: list(s.checks) })),
    })),
    plans: list(raw.plans).map((p) => ({ ...p, cases: list(p.cases) })),
  };
  const unique = (entries: { name?: string; id?: string }[], key: 'name' | 'id', at: string | PropertyKey[]) => {
    const seen = new Set<string>();
    entries.forEach((x, i) => {
      const v = x[key];
      if (typeof v !== 'string') return;
      if (seen.has(v))
        issues.push({ path: [...(Array.isArray(at) ? at : [at]), i, key], message: `duplicate ${key} "${v}"` });
      seen.add(v);
    });
  };
  // A name or id the file refers to must be one it defines (a value of the wrong type is the parse's issue).
  const reference = (known: Set<unknown>, value: unknown, path: PropertyKey[], message: string) => {
    if (typeof value === 'string' && !known.has(value)) issues.push({ path, message });
  };
  unique(d.environments, 'name', 'environments');
  unique(d.hosts, 'name', 'hosts');
  unique(d.flows, 'name', 'flows');
  unique(d.items, 'id', 'items');
  unique(d.plans, 'id', 'plans');
  const plans = new Set(d.plans.map((p) => p.id));
  d.plans.forEach((p, pi) => {
    unique(p.cases, 'name', ['plans', pi, 'cases']);
    p.cases.forEach((c, ci) => {
      if (c.name === 'host-reset' || c.name === 'gate')
        issues.push({ path: ['plans', pi, 'cases', ci, 'name'], message: `"${c.name}" names the plan's own step` });
    });
  });
  const envs = new Set(d.environments.map((e) => e.name));
  const hosts = new Set(d.hosts.map((h) => h.name));
  d.flows.forEach((f, fi) => {
    const stageNames = new Set<string>();
    f.stages.forEach((s, si) => {
      if (stageNames.has(s.name))
        issues.push({ path: ['flows', fi, 'stages', si, 'name'], message: `duplicate stage "${s.name}"` });
      stageNames.add(s.name);
      reference(envs, s.target, ['flows', fi, 'stages', si, 'target'], `no environment named "${s.target}"`);
      s.checks.forEach((c, ci) => {
        reference(plans, c.plan, ['flows', fi, 'stages', si, 'checks', ci, 'plan'], `no plan with id "${c.plan}"`);
      });
      if (s.action && 'ssh' in s.action && s.action.ssh && !hosts.has(s.action.ssh.host)) {
        issues.push({
          path: ['flows', fi, 'stages', si, 'action', 'ssh', 'host'],
          message: `no host named "${s.action.ssh.host}"`,
        });
      }
    });
  });
  if (d.flows.filter((f) => f.completion_flow).length > 1)
    issues.push({ path: ['flows'], message: 'at most one flow is the completion flow' });
  const prefix = d.item_prefix;
  const flowNames = new Set(d.flows.map((f) => f.name));
  const itemIds = new Set(d.items.map((i) => i.id));
  d.items.forEach((item, ii) => {
    reference(
      flowNames,
      item.completion_flow,
      ['items', ii, 'completion_flow'],
      `no flow named "${item.completion_flow}"`,
    );
    list(item.depends_on).forEach((dep, di) => {
      reference(itemIds, dep.item, ['items', ii, 'depends_on', di, 'item'], `no item "${dep.item}" in this file`);
      if (dep.item === item.id)
        issues.push({ path: ['items', ii, 'depends_on', di, 'item'], message: 'an item cannot depend on itself' });
      reference(
        envs,
        dep.environment,
        ['items', ii, 'depends_on', di, 'environment'],
        `no environment named "${dep.environment}"`,
      );
    });
    if (prefix && typeof item.id === 'string' && !item.id.startsWith(`${prefix}-`))
      issues.push({ path: ['items', ii, 'id'], message: `item ids of this project start with ${prefix}-` });
    const cases = new Set<string>();
    item.obligations.forEach((o, oi) => {
      if (cases.has(o.case))
        issues.push({ path: ['items', ii, 'obligations', oi, 'case'], message: `duplicate case "${o.case}"` });
      cases.add(o.case);
      reference(plans, o.plan_id, ['items', ii, 'obligations', oi, 'plan_id'], `no plan with id "${o.plan_id}"`);
      reference(
        envs,
        o.target_env,
        ['items', ii, 'obligations', oi, 'target_env'],
        `no environment named "${o.target_env}"`,
      );
    });
  });
  return issues;
}

/** Structure and cross-references together: the parsed definition, or every problem found. */
export function validateProjectDefinition(document: unknown): {
  definition?: ProjectDefinition;
  issues: DefinitionIssue[];
} {
  const parsed = ProjectDefinition.safeParse(document);
  const issues: DefinitionIssue[] = [
    ...(parsed.success ? [] : parsed.error.issues.map((i) => ({ path: i.path, message: i.message }))),
    ...crossReferenceIssues(document),
  ];
  return issues.length || !parsed.success ? { issues } : { definition: parsed.data, issues };
}

export type StageDefinition = z.infer<typeof Stage>;
export type DeployActionDefinition = z.infer<typeof DeployAction>;

/** `flows[0].stages[1].kind` from zod's path. */
export function formatPath(path: PropertyKey[]): string {
  return (
    path.reduce<string>(
      (acc, p) => (typeof p === 'number' ? `${acc}[${p}]` : acc ? `${acc}.${String(p)}` : String(p)),
      '',
    ) || '(top level)'
  );
}
