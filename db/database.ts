import type { ColumnType, Generated, Insertable, Selectable } from 'kysely';
import type { TargetKind } from '../domain/claimKinds';

/** Kysely table types, one interface per table of db/migrations. */
type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type NullableTimestamp = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;

export interface ProjectsTable {
  project_id: Generated<number>;
  name: string;
  item_prefix: string;
  created_at: Timestamp;
}

export interface ProjectGrantsTable {
  project_id: number;
  actor_id: string;
  permission: string;
  granted_at: Timestamp;
}

export type Harness = 'claude' | 'codex' | 'cursor' | 'other';

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
}

export interface BacklogItemsTable {
  item_id: Generated<number>;
  project_id: number;
  number: number;
  title: string | null;
  created_at: Timestamp;
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
}

export interface TestMachinesTable {
  name: string;
  host: string;
  port: number;
  ssh_user: string;
  identity_file: string;
  host_key: string;
  host_key_fingerprint: string;
  host_key_source: 'host_key_file' | 'trust_on_first_use';
  verify_command: string;
  capture_command: string;
  added_at: Timestamp;
}

export type CheckKind = 'verification' | 'golden_capture';

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
}

export type ProjectRow = Selectable<ProjectsTable>;
export type SessionRow = Selectable<SessionsTable>;
export type ClaimRow = Selectable<WorkClaimsTable>;
export type NewClaim = Insertable<WorkClaimsTable>;
export type TestMachineRow = Selectable<TestMachinesTable>;
export type WaitRow = Selectable<QaTestMachineWaitsTable>;
