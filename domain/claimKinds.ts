/**
 * Every claim kind lives in one work_claims table (C1). Three of them are coordination
 * kinds (C2); `deploy_serialization` is retired but its old rows remain as history (C12).
 */
export const WORK_KINDS = ['item', 'epic_task', 'process', 'steering'] as const;
export const COORDINATION_KINDS = ['migration_serialization', 'qa_admission', 'route_qualification'] as const;
export const RETIRED_KINDS = ['deploy_serialization'] as const;
/** Path claims decorate or sit beside work claims; strategy-document locks fold into steering seats (B1, B5). */
export const PATH_AND_DOC_KINDS = ['path_claim', 'strategy_doc_claim'] as const;
export const TARGET_KINDS = [...WORK_KINDS, ...COORDINATION_KINDS, ...RETIRED_KINDS, ...PATH_AND_DOC_KINDS] as const;

export type TargetKind = (typeof TARGET_KINDS)[number];

/**
 * C5 stickiness: the migration and the remote suite keep running after the session that
 * started them goes quiet, so the sweep, the session-end release and the claim-free end
 * check skip these; only the audited operator release frees them.
 */
export const STICKY_KINDS: readonly TargetKind[] = ['migration_serialization', 'qa_admission'];

export function isSticky(kind: TargetKind): boolean {
  return STICKY_KINDS.includes(kind);
}

/** Kinds rendered as 🔒 coordination keycaps and listed by `coordination-claim list`. */
export const OPERATOR_KEYED_KINDS: readonly TargetKind[] = [...COORDINATION_KINDS, ...RETIRED_KINDS];
