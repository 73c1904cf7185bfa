import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { CheckKind } from '../domain/checkKinds';

/**
 * Every signal, update and query of yoke's workflows, and their deterministic ids, in one
 * place: workflows, activities and the CLI all import these.
 */

// test-machine wait: test-machine-wait/<machine>/<sessionId>
export interface WaitInput {
  testMachine: string;
  sessionId: string;
}
export interface TurnReserved {
  claimId: number;
  reservedUntil: string;
}
export type WaitWorkflowState = 'waiting' | 'reserved' | 'granted' | 'cancelled';
export interface WaitSnapshot {
  state: WaitWorkflowState;
  turn: TurnReserved | null;
  cancelReason: string | null;
}

export const hostReserved = defineSignal<[TurnReserved]>('hostReserved');
export const turnConsumed = defineSignal('turnConsumed');
export const cancelWait = defineSignal<[{ reason: string }]>('cancelWait');
/** Completes once the wait is no longer waiting: the caller's turn is reserved, or it was cancelled. */
export const awaitTurn = defineUpdate<WaitSnapshot>('awaitTurn');
export const waitState = defineQuery<WaitSnapshot>('state');

export function waitWorkflowId(testMachine: string, sessionId: string): string {
  // A machine or session name may hold '/': escaped (with '%'), so machine a/b's wait and machine
  // a's wait for session b/... never share an id; names without either read as they are.
  const part = (name: string) => name.replace(/%/g, '%25').replace(/\//g, '%2F');
  return `test-machine-wait/${part(testMachine)}/${part(sessionId)}`;
}

// test-machine check (verify / golden capture): test-machine-check/<machine>/<uuid>
export interface CheckInput {
  testMachine: string;
  sessionId: string;
  kind: CheckKind;
}

export function checkWorkflowId(testMachine: string, kind: CheckKind, nonce: string): string {
  return `test-machine-${kind === 'verification' ? 'verify' : 'golden-capture'}/${testMachine}/${nonce}`;
}

export const YOKE_TEST_MACHINE = 'YokeTestMachine';

// deployment run: deployment-run/<runId>
export interface RunInput {
  runId: string;
  /**
   * The walk this workflow owns (deployment_runs.walk, set by execute and retry). Absent, the
   * workflow adopts the run's current walk (a workflow started before walks were numbered).
   */
  walk?: number;
}
export interface RunSnapshot {
  runId: string;
  walk: number | null;
  phase: 'starting' | 'stage' | 'settling' | 'done';
  stage: string | null;
  ordinal: number | null;
  /** 'qa' | 'approval' while a stage waits for people; null otherwise. */
  waitingFor: string | null;
  /** Signals seen and Postgres re-reads made by this workflow run (continue-as-new starts again). */
  wakeUps: number;
  outcome: string | null;
}
export interface RunOutcome {
  /** The run's status in Postgres when the workflow ended, or 'superseded' when a newer walk owns it. */
  status: string;
}
/** Sent after a QA verdict is recorded in Postgres: the QA stage re-reads what is outstanding. */
export const qaSettled = defineSignal('qaSettled');
/** Sent after an approval is recorded in Postgres. */
export const stageApproved = defineSignal<[{ stage: string }]>('stageApproved');
/** Sent after another session took over the run's driver attachment (R1): waits re-read. */
export const runTakenOver = defineSignal<[{ sessionId: string }]>('runTakenOver');
/** Sent after the run was terminalized in Postgres: a running stage is cancelled and the workflow ends. */
export const runTerminalized = defineSignal<[{ status: string }]>('runTerminalized');
export const runState = defineQuery<RunSnapshot>('state');
/** T2: sent after a takeover committed: the run's work continues under its successor; this workflow ends superseded. */
export const runSuperseded = defineSignal<[{ successorRunId: string }]>('runSuperseded');
/** Sent after something a settling run may be waiting on changed: the run retries its settlement (S5). */
export const settlementReplay = defineSignal('settlementReplay');

/**
 * Sent after a member joined or left an executing run: the run's YokeItem search attribute
 * follows. `version` grows with every membership change (members + 2 x removals), so a
 * message read before a later change never overwrites that change's labels.
 */
export const membersChanged = defineSignal<[{ items: string[]; version: number }]>('membersChanged');

export function runWorkflowId(runId: string): string {
  return `deployment-run/${runId}`;
}

/** Search attributes (registered at dev-server start) so operators filter runs in the Web UI. */
export const PROJECT_KEY = defineSearchAttributeKey('YokeProject', SearchAttributeType.KEYWORD);
export const RUN_STATUS_KEY = defineSearchAttributeKey('YokeRunStatus', SearchAttributeType.KEYWORD);
export const TARGET_ORIGIN_KEY = defineSearchAttributeKey('YokeTargetOrigin', SearchAttributeType.KEYWORD);
export const ITEM_KEY = defineSearchAttributeKey('YokeItem', SearchAttributeType.KEYWORD_LIST);

// session usage fold: session-usage/<sessionId>
/**
 * A payload-free nudge (issues 5 and 13): fold requests live in Postgres
 * (session_usage_fold_requests, written under the requester's role); the workflow reads them
 * back and folds them one at a time, in order (U10). Whatever a sender attaches is ignored.
 */
export const foldRequested = defineSignal<[unknown?]>('foldRequested');

export function usageWorkflowId(sessionId: string): string {
  return `session-usage/${sessionId}`;
}

// QA plan execution: qa-plan-execution/<executionId>
export interface ExecutionSnapshot {
  executionId: number;
  phase: 'starting' | 'step' | 'waiting_for_host' | 'waiting_for_verdict' | 'ending' | 'done';
  step: string | null;
  ordinal: number | null;
  outcome: string | null;
}
export type { RecordedCase } from '../activities/qa/executions';
/** W2: the line reserved the machine for this execution; its next acquire consumes the turn. */
export const executionHostReserved = defineSignal<[{ testMachine: string; claimId: number }]>('hostReserved');
/** The execution ended in Postgres (aborted, superseded, its run terminalized): stop walking. */
export const executionEnded = defineSignal<[{ status: string }]>('executionEnded');
/**
 * Issue 13: a nudge only. Verdicts and waivers are written by the CLI under its caller's role
 * (row-level security applies R1 there); this signal carries no verdict and no authority: the
 * workflow re-reads the execution's recorded cases from Postgres, so a forged signal records nothing.
 */
export const casesRecorded = defineSignal('casesRecorded');
export const executionState = defineQuery<ExecutionSnapshot>('state');
/** T2: a takeover moved the execution to another run; it continues under that run, same id. */
export const executionRunMoved = defineSignal<[{ runId: string }]>('executionRunMoved');

export function qaExecutionWorkflowId(executionId: number): string {
  return `qa-plan-execution/${executionId}`;
}
