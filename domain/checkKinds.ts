/** What a test-machine check does: verify the machine, or capture its golden state. */
export const CHECK_KINDS = ['verification', 'golden_capture'] as const;
export type CheckKind = (typeof CHECK_KINDS)[number];
