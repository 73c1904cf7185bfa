import type { TrackerConfig } from '../../domain/projectDefinition';

/**
 * S3 tracker sync: the effects phase tells the project's issue tracker that a member was
 * delivered. Every implementation is idempotent: syncing an issue that is already closed
 * changes nothing, so a replay after a crash between the call and its ledger row applies
 * the effect once.
 */
export interface DeliveredIssue {
  issue: number;
  item: string;
  run_id: string;
  candidate_sha: string;
}

export interface IssueTracker {
  /** Closes the issue as completed; returns what it did ('closed', 'already closed'). */
  markDelivered(issue: DeliveredIssue): Promise<string>;
}

/** The default: a project without a tracker has nothing to sync. */
export const noopTracker: IssueTracker = {
  markDelivered: async () => 'no tracker configured',
};

/** GitHub issues through the REST API (@octokit/rest), per project configuration. */
export async function githubTracker(
  config: NonNullable<TrackerConfig['github']>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<IssueTracker> {
  const { Octokit } = await import('@octokit/rest');
  const token = env[config.token_env];
  const octokit = new Octokit({
    auth: token,
    baseUrl: config.api_url ?? 'https://api.github.com',
    userAgent: 'yoke-settlement',
    request: { timeout: 30_000 },
  });
  const where = { owner: config.owner, repo: config.repo };
  return {
    async markDelivered(d: DeliveredIssue): Promise<string> {
      try {
        const { data } = await octokit.rest.issues.get({ ...where, issue_number: d.issue });
        if (data.state === 'closed') return 'already closed';
        await octokit.rest.issues.update({
          ...where,
          issue_number: d.issue,
          state: 'closed',
          state_reason: 'completed',
        });
        return `closed (${d.item} delivered by ${d.run_id} at ${d.candidate_sha})`;
      } catch (err) {
        throw describedRequestError(err);
      }
    },
  };
}

/**
 * A refused GitHub request as the effect's stored error: the HTTP status and the request, then
 * what GitHub said. Octokit's own message is the response body's, which can say nothing ("Unknown error: {}").
 */
function describedRequestError(err: unknown): Error {
  const e = err as { status?: unknown; message?: string; request?: { method?: string; url?: string } };
  if (typeof e.status !== 'number' || !e.request) return err as Error;
  const said = e.message && !/^(Unknown error: )?\{\}$/.test(e.message) ? `: ${e.message}` : ' (no message)';
  return new Error(`GitHub answered HTTP ${e.status} to ${e.request.method} ${e.request.url}${said}`);
}

export type TrackerFactory = (config: TrackerConfig | null) => Promise<IssueTracker>;

/** Picks the implementation a project's definition configures. */
export const defaultTrackerFactory: TrackerFactory = async (config) =>
  config?.github ? githubTracker(config.github) : noopTracker;
