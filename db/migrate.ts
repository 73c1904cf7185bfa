import { Migrator, type Kysely, type Migration, type MigrationProvider } from 'kysely';
import * as foundation from './migrations/0001_foundation';
import * as testMachines from './migrations/0002_test_machines';
import * as deploymentRuns from './migrations/0003_deployment_runs';
import * as sessionUsage from './migrations/0004_session_usage';
import * as reviewFixes from './migrations/0006_review_fixes';
import * as runWalks from './migrations/0007_run_walks';
import * as qaPlanExecutions from './migrations/0008_qa_plan_executions';
import * as boardClaims from './migrations/0009_board_claims';
import * as settlement from './migrations/0011_settlement';
import * as qaExecutionTurns from './migrations/0012_qa_execution_turns';
import * as reviewCheckHolds from './migrations/0014_review_check_holds';
import * as reviewMachineNames from './migrations/0014_review_machine_names';
import * as takeover from './migrations/0015_takeover';
import * as releaseTerminalOccupancy from './migrations/0013_release_terminal_occupancy';
import * as actors from './migrations/0016_actors';
import * as rowSecurity from './migrations/0016_row_security';
import * as approvalRule from './migrations/0016_run_approval_rule';
import * as qaVerdictAuthority from './migrations/0017_qa_verdict_authority';
import * as sshCredentials from './migrations/0017_ssh_credentials';
import * as waitRules from './migrations/0017_wait_rules';
import * as memberAuthority from './migrations/0018_member_authority';
import * as cheapChecks from './migrations/0019_cheap_checks';
import * as oneStatementRelease from './migrations/0019_one_statement_release';
import * as releaseServesLine from './migrations/0019_release_serves_line';
import * as stageApprovals from './migrations/0020_stage_approvals';
import * as executeOrigins from './migrations/0021_execute_origins';
import * as executeRoundTrips from './migrations/0022_execute_round_trips';
import * as executeTargetedReads from './migrations/0022_execute_targeted_reads';
import * as releaseWithoutWaiters from './migrations/0023_release_without_waiters';
import * as occupancyOneSnapshot from './migrations/0025_occupancy_one_snapshot';
import * as occupancyLiveFirst from './migrations/0025_occupancy_one_snapshot_live_first';
import * as qaReaderPinnedFlow from './migrations/0026_qa_reader_pinned_flow';
import * as authorityHoles from './migrations/0027_authority_holes';
import * as usageFoldRequests from './migrations/0028_usage_fold_requests';
import * as settlementUserRole from './migrations/0029_settlement_user_role';
import * as operatorEventOnce from './migrations/0030_operator_event_once';
import * as driverFreshness from './migrations/0032_driver_freshness';
import * as runQaVerdictRule from './migrations/0032_run_qa_verdict_rule';
import * as waitOwnerRule from './migrations/0032_wait_owner_rule';
import * as eventRule from './migrations/0032_event_rule';
import * as doneGateDependencies from './migrations/0033_done_gate_dependencies';
import * as leanClaimPath from './migrations/0034_lean_claim_path';
import * as audcDeliveredClaims from './migrations/0037_audc_delivered_claims';
import * as claimRules from './migrations/0038_claim_rules';
import * as claimperfLeanClaims from './migrations/0043_claimperf_lean_claims';
import * as audb4SessionRequestEvent from './migrations/0044_audb4_session_request_event';
import * as aude5AdminHint from './migrations/0046_aude5_admin_hint';
import * as usageReadVisibility from './migrations/0047_usage_read_visibility';
import * as claimperfLeanPair from './migrations/0050_claimperf_lean_pair';
import * as foldRequestVisibility from './migrations/0052_fold_request_visibility';
import * as qaReaderMissingPlans from './migrations/0053_qa_reader_missing_plans';
import * as claimUnitIndex from './migrations/0054_claim_unit_index';
import * as claimUserTriggers from './migrations/0055_claim_user_triggers';
import * as sessionUpdateGuard from './migrations/0056_session_update_guard';
import * as sessionIdentityKept from './migrations/0057_session_identity_kept';
import * as runChangeWording from './migrations/0058_run_change_wording';
import * as claimTimeIsWallTime from './migrations/0059_claim_time_is_wall_time';
import * as userTimesAndOperatorSession from './migrations/0060_user_times_and_operator_session';
import * as claimUserTriggersFolded from './migrations/0061_claim_user_triggers_folded';
import * as testMachineTakeLock from './migrations/0062_test_machine_take_lock';
import * as claimHeartbeatFromItsTake from './migrations/0063_claim_heartbeat_from_its_take';
import * as userInsertTimes from './migrations/0064_user_insert_times';

/** Migrations are listed here in order; the file names keep their numbers. */
const MIGRATIONS: Record<string, Migration> = {
  '0001_foundation': foundation,
  '0002_test_machines': testMachines,
  '0003_deployment_runs': deploymentRuns,
  '0004_session_usage': sessionUsage,
  '0006_review_fixes': reviewFixes,
  '0007_run_walks': runWalks,
  '0008_qa_plan_executions': qaPlanExecutions,
  '0009_board_claims': boardClaims,
  '0011_settlement': settlement,
  '0012_qa_execution_turns': qaExecutionTurns,
  '0014_review_check_holds': reviewCheckHolds,
  '0014_review_machine_names': reviewMachineNames,
  '0015_takeover': takeover,
  '0013_release_terminal_occupancy': releaseTerminalOccupancy,
  '0016_actors': actors,
  '0016_row_security': rowSecurity,
  '0016_run_approval_rule': approvalRule,
  '0017_qa_verdict_authority': qaVerdictAuthority,
  '0017_ssh_credentials': sshCredentials,
  '0017_wait_rules': waitRules,
  '0018_member_authority': memberAuthority,
  '0019_cheap_checks': cheapChecks,
  '0019_one_statement_release': oneStatementRelease,
  '0019_release_serves_line': releaseServesLine,
  '0020_stage_approvals': stageApprovals,
  '0021_execute_origins': executeOrigins,
  '0022_execute_round_trips': executeRoundTrips,
  '0022_execute_targeted_reads': executeTargetedReads,
  '0023_release_without_waiters': releaseWithoutWaiters,
  '0025_occupancy_one_snapshot': occupancyOneSnapshot,
  '0025_occupancy_one_snapshot_live_first': occupancyLiveFirst,
  '0026_qa_reader_pinned_flow': qaReaderPinnedFlow,
  '0027_authority_holes': authorityHoles,
  '0028_usage_fold_requests': usageFoldRequests,
  '0029_settlement_user_role': settlementUserRole,
  '0030_operator_event_once': operatorEventOnce,
  '0032_driver_freshness': driverFreshness,
  '0032_event_rule': eventRule,
  '0032_run_qa_verdict_rule': runQaVerdictRule,
  '0032_wait_owner_rule': waitOwnerRule,
  '0033_done_gate_dependencies': doneGateDependencies,
  '0034_lean_claim_path': leanClaimPath,
  '0037_audc_delivered_claims': audcDeliveredClaims,
  '0038_claim_rules': claimRules,
  '0043_claimperf_lean_claims': claimperfLeanClaims,
  '0044_audb4_session_request_event': audb4SessionRequestEvent,
  '0046_aude5_admin_hint': aude5AdminHint,
  '0047_usage_read_visibility': usageReadVisibility,
  '0050_claimperf_lean_pair': claimperfLeanPair,
  '0052_fold_request_visibility': foldRequestVisibility,
  '0053_qa_reader_missing_plans': qaReaderMissingPlans,
  '0054_claim_unit_index': claimUnitIndex,
  '0055_claim_user_triggers': claimUserTriggers,
  '0056_session_update_guard': sessionUpdateGuard,
  '0057_session_identity_kept': sessionIdentityKept,
  '0058_run_change_wording': runChangeWording,
  '0059_claim_time_is_wall_time': claimTimeIsWallTime,
  '0060_user_times_and_operator_session': userTimesAndOperatorSession,
  '0061_claim_user_triggers_folded': claimUserTriggersFolded,
  '0062_test_machine_take_lock': testMachineTakeLock,
  '0063_claim_heartbeat_from_its_take': claimHeartbeatFromItsTake,
  '0064_user_insert_times': userInsertTimes,
};

class StaticMigrationProvider implements MigrationProvider {
  async getMigrations(): Promise<Record<string, Migration>> {
    return MIGRATIONS;
  }
}

/** Brings the schema to the latest migration. Kysely's migrator serializes concurrent callers. */
export async function migrateToLatest(db: Kysely<any>): Promise<string[]> {
  // Branches land migrations in any order; a database migrated by an earlier build still takes
  // a lower-numbered migration that arrived later.
  const migrator = new Migrator({ db, provider: new StaticMigrationProvider(), allowUnorderedMigrations: true });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
