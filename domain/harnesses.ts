/**
 * The agent harnesses yoke knows, one list each, so the CLI's enums, the column types and the
 * readers cannot drift apart. `other` registers a session whose transcripts yoke cannot read.
 */
export const HARNESSES = ['claude', 'codex', 'cursor', 'other'] as const;
export type Harness = (typeof HARNESSES)[number];

/** Harnesses whose transcripts the usage readers fold (U5). */
export const FOLDED_HARNESSES = ['claude', 'codex', 'cursor'] as const;
export type FoldedHarness = (typeof FOLDED_HARNESSES)[number];

/** Harnesses whose transcripts sit in a default directory that a backfill can walk. */
export const BACKFILL_HARNESSES = ['claude', 'codex'] as const;
export type BackfillHarness = (typeof BACKFILL_HARNESSES)[number];
