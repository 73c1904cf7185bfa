import type { RevisionCheck } from '../../db/database';
import { sameCommit } from '../../domain/qaPlan';

export interface ServedRevision {
  revision_check: RevisionCheck;
  observed_commit: string | null;
  detail: string;
}

const ASK_TIMEOUT_MS = 5_000;
const COMMIT = /\b[0-9a-f]{7,64}\b/i;

/**
 * Q2: asks the target what it serves (GET <url><served_revision_path>). The answer is a bare
 * commit, or JSON naming it as `commit`, `revision` or `sha`. A target that cannot be asked, or
 * whose answer names no commit, is `unverified`; a different build is `mismatch` and QA proceeds.
 */
export async function askServedRevision(
  url: string | null,
  path: string,
  delivered: string,
  timeoutMs = ASK_TIMEOUT_MS,
): Promise<ServedRevision> {
  if (!url) return { revision_check: 'unverified', observed_commit: null, detail: 'the target has no url to ask' };
  // GET <url><served_revision_path>: a target served under a path (https://host/shop) is asked
  // there (https://host/shop/revision), never at its host's root, which may serve another app.
  const where = new URL(`${url.replace(/\/+$/, '')}${path.startsWith('/') ? path : `/${path}`}`).toString();
  let body: string;
  try {
    const response = await fetch(where, { signal: AbortSignal.timeout(timeoutMs) });
    body = (await response.text()).slice(0, 4096);
    if (!response.ok)
      return {
        revision_check: 'unverified',
        observed_commit: null,
        detail: `GET ${where} answered ${response.status}`,
      };
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    return {
      revision_check: 'unverified',
      observed_commit: null,
      detail: `GET ${where} failed: ${cause?.code ?? cause?.message ?? (err as Error).message}`,
    };
  }
  let observed: string | undefined;
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>;
    const named = parsed?.commit ?? parsed?.revision ?? parsed?.sha;
    if (typeof named === 'string') observed = named.trim();
  } catch {
    observed = body.match(COMMIT)?.[0];
  }
  if (!observed || !COMMIT.test(observed))
    return { revision_check: 'unverified', observed_commit: null, detail: `GET ${where} named no commit` };
  return sameCommit(observed, delivered)
    ? { revision_check: 'match', observed_commit: observed, detail: `${where} serves ${observed}` }
    : {
        revision_check: 'mismatch',
        observed_commit: observed,
        detail: `${where} serves ${observed}, the run delivered ${delivered}`,
      };
}
