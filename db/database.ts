import type { ColumnType, Generated, Selectable } from 'kysely';
import type { CheckKind } from '../domain/checkKinds';
import type { TargetKind } from '../domain/claimKinds';
import type { QaPlanDefinition, StageDefinition, TrackerConfig } from '../domain/projectDefinition';
import type { DeliveryEvidence, ItemStatus } from '../domain/completion';
import type { FoldedHarness, Harness } from '../domain/harnesses';
import type { RunStatus } from '../domain/runStatuses';
import type { UsageTotals } from '../domain/usage/buckets';
import type { Checkpoint } from '../domain/usage/checkpoint';
import type { PricingRevision } from '../domain/usage/pricing';
import type { CreateRequest } from '../domain/canonicalRequest';

/** Kysely table types, one interface per table of db/migrations. */
type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type NullableTimestamp = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;

export interface ProjectsTable {
  project_id: Generated<number>;
  name: string;
  item_prefix: string;
  created_at: Timestamp;
  /** S3: the project's issue tracker (from the definition); null means the no-op tracker. */
  tracker: NullableJson<TrackerConfig>;
  /** T3: the project's git repository (a local checkout), where takeover reads containment. */
  repository: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface ProjectGrantsTable {
  project_id: number;
  actor_id: string;
  permission: string;
  granted_at: Timestamp;
}

export type { Harness };

export interface SessionsTable {
  session_id: string;
  actor_id: string;
  project_id: number | null;
  machine_id: string | null;
  harness: ColumnType<Harness, Harness | undefined, Harness>;
  offered_at: Timestamp;
  heartbeat_at: Timestamp;
  ended_at: NullableTimestamp;
  terminated_at: NullableTimestamp;
  end_reason: string | null;
  probe: ColumnType<boolean, boolean | undefined, boolean>;
  requested_model: string | null;
  requested_effort: string | null;
  requested_window: number | null;
  served_model: string | null;
  served_window: number | null;
  served_attested_at: NullableTimestamp;
  /** U2: the provider-attested effort; NULL until a served statement names one. */
  served_effort: ColumnType<string | null, string | null | undefined, string | null>;
  /** Issue 13: the role that registered the session (its actor, or an admin for it); set by Postgres. */
  registered_by: ColumnType<string, never, never>;
}

/** A session as the board and the usage views read it through JSON: its project by name, its times as ISO text. */
export interface SessionListing {
  session_id: string;
  actor_id: string;
  project: string | null;
  machine_id: string | null;
  harness: string;
  offered_at: string;
  ended_at: string | null;
}

export interface BacklogItemsTable {
  item_id: Generated<number>;
  project_id: number;
  number: number;
  title: string | null;
  created_at: Timestamp;
  defined_in_project: ColumnType<boolean, boolean | undefined, boolean>;
  status: ColumnType<ItemStatus, ItemStatus | undefined, ItemStatus>;
  status_changed_at: NullableTimestamp;
  delivery_evidence: ColumnType<DeliveryEvidence, string | undefined, string>;
  /** D8: the item's selected completion flow; null reads the project's default. */
  completion_flow_id: number | null;
  tracker_issue: number | null;
  lane_path: string | null;
}

export type ClaimScope = Record<string, string | number | null>;

export interface WorkClaimsTable {
  claim_id: Generated<number>;
  target_kind: TargetKind;
  scope: ColumnType<ClaimScope, string, string>;
  key: string | null;
  project_id: number | null;
  item_id: number | null;
  session_id: string;
  claimed_at: Timestamp;
  heartbeat_at: Timestamp;
  released_at: NullableTimestamp;
  release_reason: string | null;
  released_by_session_id: string | null;
  released_by_actor_id: string | null;
  /** W7: set while the row is a reserved waiting-line turn not yet consumed. */
  reserved_until: NullableTimestamp;
  /** The QA plan execution this turn was taken or reserved for (W2): its lease, no other's. */
  qa_plan_execution_id: ColumnType<number | null, number | null | undefined, number | null>;
}

/** Where and as whom a host is reached over SSH, with its pinned host key ("type base64"). */
interface SshAddressColumns {
  host: string;
  port: number;
  ssh_user: string;
  /** Issue 13: the name of a key in the worker's YOKE_SSH_KEY_DIR, never a path. */
  credential: string;
  host_key: string;
}

export interface TestMachinesTable extends SshAddressColumns {
  name: string;
  host_key_fingerprint: string;
  host_key_source: 'host_key_file' | 'trust_on_first_use';
  verify_command: string;
  capture_command: string;
  added_at: Timestamp;
}

export interface TestMachineChecksTable {
  check_id: Generated<number>;
  /** The workflow that ran the check: a retried record finds its own row. */
  request_id: string | null;
  test_machine: string;
  kind: CheckKind;
  passed: boolean;
  reason: string;
  exit_code: number | null;
  output_digest: string | null;
  output_excerpt: string | null;
  session_id: string | null;
  qa_plan_execution_id: number | null;
  started_at: Timestamp;
  finished_at: Timestamp;
}

export type WaitState = 'waiting' | 'reserved' | 'granted' | 'cancelled';

export interface QaTestMachineWaitsTable {
  wait_id: Generated<number>;
  test_machine: string;
  session_id: string;
  actor_id: string;
  queued_at: Timestamp;
  qa_plan_execution_id: number | null;
  state: ColumnType<WaitState, WaitState | undefined, WaitState>;
  claim_id: number | null;
  resume_command: string;
  rationale: string;
  settled_at: NullableTimestamp;
  cancel_reason: string | null;
}

export interface EventsTable {
  event_id: Generated<string>;
  event_type: string;
  project_id: number | null;
  session_id: string | null;
  claim_id: number | null;
  payload: ColumnType<Record<string, unknown>, string | undefined, string>;
  created_at: Timestamp;
  /** Issue 13: the role that wrote the event (`session_user`); set by Postgres. */
  actor_id: ColumnType<string, never, never>;
}

export interface EnvironmentsTable {
  environment_id: Generated<number>;
  project_id: number;
  name: string;
  url: string | null;
  preview_slug: string | null;
  tier: 'preview' | 'dev' | 'stage' | 'production';
  occupancy_unit: string;
  /** Q1/Q2: where the environment says which commit it serves. */
  served_revision_path: ColumnType<string, string | undefined, string>;
}

export interface DeployHostsTable extends SshAddressColumns {
  project_id: number;
  name: string;
}

export interface FlowsTable {
  flow_id: Generated<number>;
  project_id: number;
  name: string;
  delivery_custody: boolean;
  completion_flow: boolean;
  stages: ColumnType<StageDefinition[], string, string>;
}

export interface ItemQaCasesTable {
  item_id: number;
  case_key: string;
  qa_phase: 'pre_merge' | 'post_deploy';
  target_env: string | null;
  plan_id: string | null;
  blocking: ColumnType<boolean, boolean | undefined, boolean>;
  waived: ColumnType<boolean, boolean | undefined, boolean>;
  superseded: ColumnType<boolean, boolean | undefined, boolean>;
  run_id: string | null;
}

type Json<T> = ColumnType<T, string, string>;
type NullableJson<T> = ColumnType<T | null, string | null | undefined, string | null>;

export interface DeploymentRunsTable {
  run_id: string;
  project_id: number;
  flow_id: number;
  target_environment_id: number;
  candidate_sha: string;
  status: ColumnType<RunStatus, RunStatus | undefined, RunStatus>;
  current_stage: string | null;
  cursor_ordinal: ColumnType<number, number | undefined, number>;
  create_idempotency_key: string | null;
  /** I1: the canonical request the run was created from (a repeat under its key is compared with it). */
  create_request: Json<CreateRequest>;
  created_by_session_id: string | null;
  created_at: Timestamp;
  executing_at: NullableTimestamp;
  frozen_at: NullableTimestamp;
  /** D1: the carried work recorded at the freeze; null before it. */
  carried_work: NullableJson<CarriedWorkItem[]>;
  occupancy_released_at: NullableTimestamp;
  settling_at: NullableTimestamp;
  terminal_at: NullableTimestamp;
  terminal_reason: string | null;
  driver_session_id: string | null;
  driver_heartbeat_at: NullableTimestamp;
  supersedes_run_id: string | null;
  superseded_by_run_id: string | null;
  settlement_committed_at: NullableTimestamp;
  settlement_blocked: NullableJson<Record<string, unknown>>;
  /** The flow's stages and the environments' URLs as they were at execute (the pinned flow). */
  pinned_flow: NullableJson<PinnedFlow>;
  /** The walk that owns the cursor: each execute from created (a retry too) starts the next one. */
  walk: ColumnType<number, number | undefined, number>;
}

/** One member's carried work as the freeze recorded it (D1). */
export interface CarriedWorkItem {
  item: string;
  requirement_ids: string[];
  /** The selection was derived at the freeze, not named at admission (D5). */
  derived: boolean;
}

export interface PinnedFlow {
  stages: StageDefinition[];
  environment_urls: Record<string, string | null>;
}

export interface DeploymentRunItemsTable {
  run_id: string;
  item_id: number;
  added_at: Timestamp;
  delivery_intent: ColumnType<'progress' | 'final', 'progress' | 'final' | undefined, 'progress' | 'final'>;
  requirement_selection: NullableJson<string[]>;
  requirement_snapshot: NullableJson<unknown>;
  containment_attestation: NullableJson<unknown>;
  /** D10: the item-project commit this membership delivered. */
  delivered_source_sha: string | null;
  /** S2: set once, by the commit phase that closed this member. */
  closed_at: NullableTimestamp;
}

/** C10: one record per (run, item) ever admitted, kept when the membership ends. */
export interface DeploymentRunMembershipsTable {
  run_id: string;
  item_id: number;
  /** The project stored at admission: the authority a member's reads and uploads act under. */
  project_id: number;
  admitted_at: Timestamp;
  ended_at: NullableTimestamp;
  ended_by: 'removed' | 'superseded' | null;
  later_run_id: string | null;
  /** As the member row had them when the membership ended (null while it lasts). */
  delivery_intent: 'progress' | 'final' | null;
  requirement_selection: NullableJson<string[]>;
}

/** C10: a file a run member uploaded, stored in Postgres under the stored member's project. */
export interface DeploymentRunMemberArtifactsTable {
  artifact_id: Generated<number>;
  run_id: string;
  item_id: number;
  /** Set by the database from the membership record, whatever the insert says. */
  project_id: ColumnType<number, never, never>;
  name: string;
  content: Buffer;
  sha256: Generated<string>;
  size_bytes: Generated<number>;
  uploaded_by_session_id: string;
  actor_id: ColumnType<string, never, never>;
  uploaded_at: Timestamp;
}

export interface DeploymentRunItemRemovalsTable {
  removal_id: Generated<number>;
  run_id: string;
  item_id: number;
  reason: string;
  removed_at: Timestamp;
  removed_by_session_id: string | null;
  later_run_id: string | null;
}

export interface DeploymentRunQaTable {
  run_id: string;
  check_name: string;
  source: 'flow-default' | 'item-rollup' | 'operator';
  blocking: boolean;
  status: ColumnType<
    'pending' | 'passed' | 'failed' | 'waived',
    'pending' | 'passed' | 'failed' | 'waived' | undefined,
    'pending' | 'passed' | 'failed' | 'waived'
  >;
  stage_name: string | null;
  retracted_at: NullableTimestamp;
  retraction: 'automatic' | 'manual' | null;
  updated_at: Timestamp;
  /** The QA plan whose passed execution answers this row, if any. */
  plan_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** T3: the run that held this row when its answer was written (set by a trigger). */
  verdict_run_id: Generated<string | null>;
}

export type StageStatus = 'pending' | 'running' | 'waiting' | 'passed' | 'failed' | 'cancelled';

export interface DeploymentRunStagesTable {
  run_id: string;
  ordinal: number;
  name: string;
  kind: string;
  target_env: string;
  status: ColumnType<StageStatus, StageStatus | undefined, StageStatus>;
  started_at: NullableTimestamp;
  finished_at: NullableTimestamp;
  detail: string | null;
  /** Who approved the waiting approval stage, from which session and when; null until approved. */
  approved_by_actor_id: ColumnType<string | null, string | null | undefined, string | null>;
  approved_by_session_id: ColumnType<string | null, string | null | undefined, string | null>;
  approved_at: NullableTimestamp;
}

export interface DeploymentRunOccupancyTable {
  run_id: string;
  unit: string;
  /** False only while the run does not occupy (kept by a trigger, migration 0022). */
  live: Generated<boolean>;
}

export interface SessionUsageTable {
  session_id: string;
  harness: FoldedHarness;
  reader_version: number;
  status: 'measured' | 'partial' | 'unavailable';
  /** JSON: absolute per-model totals (U5, U7), written as its JSON text. */
  totals: ColumnType<UsageTotals, string, string>;
  reasons: ColumnType<string[], string | undefined, string>;
  cost_caveat: string | null;
  /** JSON: the readers' watermarks and accumulators (U9, U10). */
  checkpoint: ColumnType<Checkpoint, string, string>;
  folded_at: Timestamp;
}

/** Migration 0028: a `hooks usage --async` request, written under the caller's role; the worker settles it. */
export interface SessionUsageFoldRequestsTable {
  request_id: Generated<string>;
  session_id: string;
  harness: FoldedHarness;
  artifacts: string[];
  requested_by: Generated<string>;
  requested_at: Generated<Date>;
  done_at: Date | null;
  outcome: ColumnType<unknown, never, string>;
}

export interface PricingRevisionsTable {
  revision_id: string;
  effective_at: Timestamp;
  source: string;
  estimated: ColumnType<boolean, boolean | undefined, boolean>;
  /** JSON: per-model rates (U12). */
  rates: ColumnType<PricingRevision['rates'], string, string>;
  imported_at: Timestamp;
  /** U12: set only on a revision imported with --backdate: why it reprices the past. */
  backdate_reason: ColumnType<string | null, string | null | undefined, never>;
}

export interface ItemDependenciesTable {
  item_id: number;
  depends_on_item_id: number;
  /** '' for an ordinary dependency; an environment name for an environment-specific one (D7). */
  environment: ColumnType<string, string | undefined, string>;
}

export type SettlementEffect = 'tracker_sync' | 'lane_cleanup' | 'holder_session_end';

export interface DeploymentRunMemberEffectsTable {
  run_id: string;
  item_id: number;
  effect: SettlementEffect;
  attempts: ColumnType<number, number | undefined, number>;
  lease_until: NullableTimestamp;
  applied_at: NullableTimestamp;
  outcome: string | null;
  last_error: string | null;
}

export interface CompletionRunEntry {
  run_id: string;
  status: RunStatus;
  settling: boolean;
  candidate_sha: string;
  delivered_source_sha: string | null;
  added_at: string;
}

export interface DeploymentItemCompletionRunsView {
  item_id: number;
  completion_runs: CompletionRunEntry[];
  read_run_id: string;
}

export interface QaPlansTable {
  project_id: number;
  plan_id: string;
  definition: ColumnType<QaPlanDefinition, string, string>;
}

export type ExecutionStatus = 'running' | 'passed' | 'failed' | 'aborted' | 'superseded';
export type RevisionCheck = 'match' | 'mismatch' | 'unverified';

export interface QaPlanExecutionsTable {
  execution_id: Generated<number>;
  run_id: string;
  stage_name: string;
  plan_id: string;
  item_id: number | null;
  plan: ColumnType<QaPlanDefinition, string, string>;
  session_id: string;
  status: ColumnType<ExecutionStatus, ExecutionStatus | undefined, ExecutionStatus>;
  target_environment: string;
  target_url: string | null;
  served_revision_path: string;
  delivered_commit: string;
  observed_commit: string | null;
  revision_check: RevisionCheck;
  revision_detail: string | null;
  cursor_ordinal: ColumnType<number, number | undefined, number>;
  held_claim_id: number | null;
  aborted_while_holding: ColumnType<boolean, boolean | undefined, boolean>;
  began_at: Timestamp;
  ended_at: NullableTimestamp;
  release_reason: string | null;
  /** T3: the run that owned the execution when it ended (set by a trigger). */
  verdict_run_id: Generated<string | null>;
}

export type StepKind = 'host_reset' | 'gate' | 'automatic' | 'manual';
export type CaseVerdict = 'passed' | 'failed' | 'waived';

export interface QaPlanExecutionResultsTable {
  execution_id: number;
  case_name: string;
  ordinal: number;
  kind: StepKind;
  verdict: CaseVerdict;
  observed_commit: string | null;
  revision_check: RevisionCheck;
  test_machine: string | null;
  exit_code: number | null;
  output_digest: string | null;
  output_excerpt: string | null;
  note: string | null;
  recorded_by_session_id: string | null;
  recorded_at: Timestamp;
  /** T3: the run that owned the execution when this case was recorded (set by a trigger). */
  verdict_run_id: Generated<string | null>;
}

export interface QaPlanExecutionLeasesTable {
  execution_id: number;
  claim_id: number;
  test_machine: string;
  claimed_at: Date;
}

/** One row (issue 4, R1): the deployment's settings that Postgres and the CLI both honour. */
export interface DeploymentSettingsTable {
  singleton: Generated<boolean>;
  driver_fresh_seconds: Generated<number>;
  updated_at: Generated<Date>;
}

export interface Database {
  projects: ProjectsTable;
  project_grants: ProjectGrantsTable;
  sessions: SessionsTable;
  backlog_items: BacklogItemsTable;
  work_claims: WorkClaimsTable;
  events: EventsTable;
  test_machines: TestMachinesTable;
  test_machine_checks: TestMachineChecksTable;
  qa_test_machine_waits: QaTestMachineWaitsTable;
  environments: EnvironmentsTable;
  deploy_hosts: DeployHostsTable;
  flows: FlowsTable;
  item_qa_cases: ItemQaCasesTable;
  deployment_runs: DeploymentRunsTable;
  deployment_run_items: DeploymentRunItemsTable;
  deployment_run_item_removals: DeploymentRunItemRemovalsTable;
  deployment_run_memberships: DeploymentRunMembershipsTable;
  deployment_run_member_artifacts: DeploymentRunMemberArtifactsTable;
  deployment_run_qa: DeploymentRunQaTable;
  deployment_run_stages: DeploymentRunStagesTable;
  deployment_run_occupancy: DeploymentRunOccupancyTable;
  session_usage: SessionUsageTable;
  session_usage_fold_requests: SessionUsageFoldRequestsTable;
  pricing_revisions: PricingRevisionsTable;
  item_dependencies: ItemDependenciesTable;
  deployment_run_member_effects: DeploymentRunMemberEffectsTable;
  deployment_item_completion_runs: DeploymentItemCompletionRunsView;
  qa_plans: QaPlansTable;
  qa_plan_executions: QaPlanExecutionsTable;
  qa_plan_execution_results: QaPlanExecutionResultsTable;
  qa_plan_execution_leases: QaPlanExecutionLeasesTable;
  deployment_settings: DeploymentSettingsTable;
}

export type ProjectRow = Selectable<ProjectsTable>;
export type SessionRow = Selectable<SessionsTable>;
export type ClaimRow = Selectable<WorkClaimsTable>;
export type TestMachineRow = Selectable<TestMachinesTable>;
export type WaitRow = Selectable<QaTestMachineWaitsTable>;
export type CheckRow = Selectable<TestMachineChecksTable>;
export type RunRow = Selectable<DeploymentRunsTable>;
export type FlowRow = Selectable<FlowsTable>;
export type EnvironmentRow = Selectable<EnvironmentsTable>;
export type DeployHostRow = Selectable<DeployHostsTable>;
export type ExecutionRow = Selectable<QaPlanExecutionsTable>;
export type ExecutionResultRow = Selectable<QaPlanExecutionResultsTable>;
