import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import { lineDeps, type LineDeps, type LineOptions } from '../waitingLine';
import { acquireCoordinationClaim, takeItem, takeSteeringSeat } from './acquire';
import { listClaims, listCoordinationClaims } from './list';
import { operatorRelease } from './operatorRelease';
import { releaseItem, releaseSteeringSeat, releaseWorkClaim } from './release';

export type { AcquireResult } from './acquireResult';
export type { ClaimView } from '../../db/claims';
export type { ReleaseResult } from './operatorRelease';

/**
 * Claims (C1-C12): each operation is a top-level `(deps, input)` function in acquire.ts,
 * release.ts, operatorRelease.ts and list.ts; this binds them to one set of dependencies.
 */
export function claimActivities(deps: { db: Kysely<Database>; line?: Partial<LineOptions> }) {
  const line = lineDeps(deps.db, deps.line);
  const bound =
    <I, O>(operation: (deps: LineDeps, input: I) => Promise<O>) =>
    (input: I) =>
      operation(line, input);
  return {
    acquireCoordinationClaim: bound(acquireCoordinationClaim),
    takeSteeringSeat: bound(takeSteeringSeat),
    releaseSteeringSeat: bound(releaseSteeringSeat),
    takeItem: bound(takeItem),
    releaseItem: bound(releaseItem),
    operatorRelease: bound(operatorRelease),
    releaseWorkClaim: bound(releaseWorkClaim),
    listCoordinationClaims: bound(listCoordinationClaims),
    listClaims: bound(listClaims),
  };
}
