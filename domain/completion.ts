/**
 * Completion (D7, D8, S2, S6): an item's status, the delivery_evidence stamp facts a done write
 * publishes, and the done gate that decides whether a member may close. Pure: the callers read
 * the facts and write the results.
 */
export const ITEM_STATUSES = ['open', 'in_progress', 'delivery_ready', 'done', 'cancelled'] as const;
export type ItemStatus = (typeof ITEM_STATUSES)[number];

/** D7: who delivered what, where: one entry per (run, environment), appended, never revoked. */
export interface CompletedDelivery {
  owner: string;
  member: string;
  run: string;
  environment: string;
  candidate: string;
  recorded_at: string;
}

/** S2 prerequisites, stamped before any status write so the done gates can read them. */
export interface DeliveryRung {
  rung: 'released';
  run: string;
  environment: string;
  candidate: string;
  stamped_at: string;
}

export interface StatusPreflight {
  run: string;
  qa: { requirement_id: string; status: string }[];
  approvals: { stage: string; approved: boolean }[];
  stamped_at: string;
}

export interface DeliveryEvidence {
  rung?: DeliveryRung;
  preflight?: StatusPreflight;
  completed_deliveries?: CompletedDelivery[];
}

/** One reason a member cannot close now, with the command that clears it. */
export interface BlockReason {
  code:
    | 'delivery_not_discharged'
    | 'done_gate_qa_open'
    | 'post_deploy_obligations_unanswered'
    | 'not_prepared'
    | 'item_qa_execution_live'
    | 'dependency_unsatisfied';
  message: string;
  recovery: string;
}

export interface DoneGateFacts {
  item: string;
  /** The run the completion-runs walk reads for this item (D8), if any. */
  readRun: { run_id: string; status: string; settling: boolean } | null;
  /** The run trying to close it. */
  closingRunId: string;
  /** This run's blocking, unretracted roll-up rows for the member. */
  runQa: { check_name: string; status: string }[];
  /** Blocking post_deploy obligations not waived, superseded or answered by credited proof. */
  unanswered: { requirement_id: string; target_env: string | null }[];
  /** The prerequisites have been committed (rung and preflight for this run). */
  prepared: boolean;
  /**
   * D7: dependencies not satisfied (done; an environment-specific one also attributed there),
   * nor closing in the same settlement commit (S2: all or none). environment '' is ordinary.
   */
  unmetDependencies: { item: string; environment: string }[];
}

/** D8/S1: completion authority reads a settling or succeeded run as delivered. */
export function readAsDelivered(run: DoneGateFacts['readRun']): boolean {
  return !!run && (run.status === 'succeeded' || (run.status === 'executing' && run.settling));
}

/**
 * D8: what clears a completion authority that reads another run: that run settling (a created
 * run has no workflow to watch yet: it is executed first), or the member leaving it, so the
 * walk reads the closing run's membership again.
 */
function readRunRecovery(item: string, read: { run_id: string; status: string }, closingRunId: string): string {
  const leave = `let ${closingRunId} deliver ${item}: yoke deployment-runs remove-item ${read.run_id} ${item} --reason R`;
  if (read.status === 'created') {
    const execute = `yoke deployment-runs execute ${read.run_id}`;
    if (read.run_id === closingRunId) return `settle run ${read.run_id}: ${execute}`;
    // O1: a newer run sharing an origin the closing run still occupies cannot execute yet, so
    // the way that moves now comes first
    return `${leave}; or settle run ${read.run_id}: ${execute} (it waits while ${closingRunId} occupies an origin they share)`;
  }
  const watch = `yoke deployment-runs watch ${read.run_id}`;
  if (read.run_id === closingRunId) return `settle run ${read.run_id}: ${watch}`;
  return `settle run ${read.run_id} (${watch}), or ${leave}`;
}

/** The done gate (S2, S6): every reason this member cannot be written done through this run. */
export function doneGateReasons(f: DoneGateFacts): BlockReason[] {
  const reasons: BlockReason[] = [];
  if (!f.readRun || f.readRun.run_id !== f.closingRunId || !readAsDelivered(f.readRun)) {
    reasons.push({
      code: 'delivery_not_discharged',
      message: f.readRun
        ? `${f.item}'s completion authority reads run ${f.readRun.run_id} (${f.readRun.settling ? 'settling' : f.readRun.status}), not a delivered ${f.closingRunId}`
        : `${f.item} has no completion run that delivered it`,
      recovery: f.readRun
        ? readRunRecovery(f.item, f.readRun, f.closingRunId)
        : `deliver it through its completion flow: yoke deployment-runs start-for-item ${f.item} --candidate SHA`,
    });
  }
  for (const q of f.runQa.filter((r) => r.status !== 'passed' && r.status !== 'waived')) {
    reasons.push({
      code: 'done_gate_qa_open',
      message: `blocking QA requirement ${q.check_name} is ${q.status}`,
      recovery: `yoke deployment-runs qa-verdict ${f.closingRunId} --check ${q.check_name} --status passed|waived`,
    });
  }
  if (f.unanswered.length) {
    reasons.push({
      code: 'post_deploy_obligations_unanswered',
      message: `post-deploy obligations unanswered: ${f.unanswered.map((u) => `${u.requirement_id}${u.target_env ? ` (${u.target_env})` : ''}`).join(', ')}`,
      recovery: `deliver through a run whose QA stages target them, or waive them in the project definition (waived: true) and apply; then: yoke deployment-runs update ${f.closingRunId} status succeeded`,
    });
  }
  if (f.unmetDependencies.length) {
    const deps = [...new Set(f.unmetDependencies.map((d) => d.item))];
    reasons.push({
      code: 'dependency_unsatisfied',
      message: `${f.item} depends on ${f.unmetDependencies.map((d) => `${d.item}${d.environment ? ` delivered to ${d.environment}` : ' done'}`).join(', ')}`,
      recovery: `deliver ${deps.join(', ')} first (yoke items get ${deps[0]}), then: yoke deployment-runs update ${f.closingRunId} status succeeded`,
    });
  }
  if (reasons.length === 0 && !f.prepared) {
    reasons.push({
      code: 'not_prepared',
      message: `${f.item}'s delivery_evidence rung and status preflight for ${f.closingRunId} are not committed`,
      recovery: `yoke deployment-runs update ${f.closingRunId} status succeeded`,
    });
  }
  return reasons;
}

/** The members one settlement commit closes together (all or none, S2), and the environment it delivers to. */
export interface ClosingTogether {
  itemIds: number[];
  environment: string;
}

/**
 * D7 S2: whether a dependency still holds its dependent back: it is not satisfied, and it does
 * not close in the same settlement commit delivering to the environment it names.
 */
export function dependencyUnmet(
  d: { depends_on_item_id: number; environment: string; status: ItemStatus; delivery_evidence: DeliveryEvidence },
  together?: ClosingTogether,
): boolean {
  const closesWith =
    !!together &&
    together.itemIds.includes(d.depends_on_item_id) &&
    (d.environment === '' || d.environment === together.environment);
  return !closesWith && !dependencySatisfied({ status: d.status, evidence: d.delivery_evidence }, d.environment);
}

/** D7: an ordinary dependency needs done; an environment-specific one also needs attribution there. */
export function dependencySatisfied(
  dep: { status: ItemStatus; evidence: DeliveryEvidence },
  environment: string,
): boolean {
  if (dep.status !== 'done') return false;
  if (!environment) return true;
  return (dep.evidence.completed_deliveries ?? []).some((d) => d.environment === environment);
}
