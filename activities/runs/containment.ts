import { execFile } from 'node:child_process';
import { refusal } from '../../domain/errors';
import { sameCommit, type Containment, type ContainmentAttestation } from '../../domain/containment';

const GIT_TIMEOUT_MS = 10_000;

/** git's answer: 0 is an ancestor, 1 is not; anything else (an unknown commit, no repository) is no answer. */
function isAncestor(repository: string, ancestor: string, descendant: string): Promise<boolean | string> {
  return new Promise((resolve) => {
    execFile(
      'git',
      ['-C', repository, 'merge-base', '--is-ancestor', ancestor, descendant],
      { timeout: GIT_TIMEOUT_MS },
      (err, _stdout, stderr) => {
        if (!err) return resolve(true);
        const code = (err as { code?: unknown }).code;
        if (code === 1) return resolve(false);
        resolve((stderr || err.message).trim() || `git exited ${String(code)}`);
      },
    );
  });
}

/**
 * T3: containment is prepared here, outside any transaction: a git call can take seconds and
 * must never hold a lock. The project's repository answers when it knows both commits;
 * otherwise a relayed attestation naming exactly these two commits does.
 */
export async function prepareContainment(input: {
  repository: string | null;
  predecessorCommit: string;
  successorCommit: string;
  attestation?: ContainmentAttestation;
}): Promise<Containment> {
  const { predecessorCommit: pred, successorCommit: succ } = input;
  const a = input.attestation;
  // An attestation must name exactly these two commits, whether or not git answers for itself:
  // one relayed for other commits is a mistake to say, not one to drop in silence.
  if (a && (!sameCommit(a.predecessor_commit, pred) || !sameCommit(a.successor_commit, succ))) {
    throw refusal(
      'containment_attestation_mismatch',
      `the containment attestation judges ${a.predecessor_commit} in ${a.successor_commit}, not predecessor ${pred} in successor ${succ}`,
      {
        recovery: 'relay the attestation the lane checkout gave for these two commits',
        details: { predecessor_commit: pred, successor_commit: succ, attestation: a },
      },
    );
  }
  let gitAnswer: string | null = null;
  if (input.repository) {
    const answer = await isAncestor(input.repository, pred, succ);
    if (typeof answer === 'boolean')
      return {
        contained: answer,
        basis: 'git',
        predecessor_commit: pred,
        successor_commit: succ,
        source: input.repository,
      };
    gitAnswer = answer;
  }
  if (a)
    return {
      contained: a.contained,
      basis: 'attestation',
      predecessor_commit: pred,
      successor_commit: succ,
      source: a.attested_by,
    };
  throw refusal(
    'containment_unknown',
    input.repository
      ? `git could not say whether ${succ} contains ${pred} in ${input.repository}: ${gitAnswer}`
      : `the project declares no repository, so whether ${succ} contains ${pred} cannot be read here`,
    {
      recovery: input.repository
        ? `fetch both commits into ${input.repository} (git fetch), or relay a lane checkout's verdict with --containment-attestation JSON`
        : "declare repository: PATH in the project definition and apply it, or relay a lane checkout's verdict with --containment-attestation JSON",
      details: { predecessor_commit: pred, successor_commit: succ, repository: input.repository, git: gitAnswer },
    },
  );
}

/** T1: a successor whose candidate does not contain the predecessor's is refused, naming both commits. */
export function assertContained(c: Containment, predecessor: string, successor: string): void {
  if (c.contained) return;
  throw refusal(
    'takeover_candidate_not_contained',
    `run ${successor}'s candidate ${c.successor_commit} does not contain run ${predecessor}'s candidate ${c.predecessor_commit} (${c.basis}: ${c.source})`,
    {
      recovery: `take over with a run whose candidate descends from ${c.predecessor_commit} (git merge-base --is-ancestor ${c.predecessor_commit} SHA), or let ${predecessor} finish`,
      details: { predecessor_run_id: predecessor, successor_run_id: successor, ...c },
    },
  );
}
