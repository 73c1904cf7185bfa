import { z } from 'zod';

/**
 * T1/T3: whether a successor's candidate contains its predecessor's. Read from the project's
 * git repository when this host can answer, else taken from a relayed containment_attestation:
 * the verdict a lane checkout answered instead, naming both commits it judged.
 */
const Commit = z.string().regex(/^[0-9a-f]{7,64}$/i, 'a commit sha');

export const ContainmentAttestation = z
  .object({
    predecessor_commit: Commit,
    successor_commit: Commit,
    contained: z.boolean(),
    /** Who answered (a lane checkout's path or host), for the audit trail. */
    attested_by: z.string().min(1),
  })
  .strict();
export type ContainmentAttestation = z.infer<typeof ContainmentAttestation>;

export interface Containment {
  contained: boolean;
  basis: 'git' | 'attestation';
  predecessor_commit: string;
  successor_commit: string;
  /** The repository read (git), or who attested. */
  source: string;
}

/** Two spellings of one commit (a short sha of at least 7 digits and a full one) name the same commit. */
export function sameCommit(a: string, b: string): boolean {
  const [x, y] = [a.toLowerCase(), b.toLowerCase()];
  if (x === y) return true;
  return Math.min(x.length, y.length) >= 7 && (x.startsWith(y) || y.startsWith(x));
}
