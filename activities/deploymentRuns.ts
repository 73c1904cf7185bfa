import type { Kysely } from 'kysely';
import type { Database } from '../db/database';
import type { SshTimeouts } from './hosts/ssh';
import { compositionActivities } from './runs/composition';
import type { QaNotifier } from './qa/ending';
import type { LineOptions } from './waitingLine';
import { runCreationActivities } from './runs/creation';
import { runExecutionActivities } from './runs/execution';
import { runReadActivities } from './runs/read';
import { runStageActivities } from './runs/stages';
import { settlementActivities } from './settlement/settlement';
import { takeoverActivities, type TakeoverNotifier } from './runs/takeover';
import type { TrackerFactory } from './settlement/tracker';

/** Deployment runs: creation (I1, D3-D6), execution and occupancy (O1-O5), drivers (R1), reads (D1, D2). */
export function deploymentRunActivities(deps: {
  db: Kysely<Database>;
  driverFreshMs?: number;
  ssh?: Partial<SshTimeouts>;
  tracker?: TrackerFactory;
  line?: Partial<LineOptions>;
  qaNotifier?: QaNotifier;
  takeoverNotifier?: TakeoverNotifier;
  takeoverLockTimeoutMs?: number;
}) {
  return {
    ...runCreationActivities(deps),
    ...runExecutionActivities(deps),
    ...runReadActivities(deps),
    ...runStageActivities(deps),
    ...settlementActivities(deps),
    ...compositionActivities(deps),
    ...takeoverActivities(deps),
  };
}

export type DeploymentRunActivities = ReturnType<typeof deploymentRunActivities>;
