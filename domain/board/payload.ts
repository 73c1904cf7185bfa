import { z } from 'zod';

/**
 * The board payload: what the one board read returns and what a recorded BOARD.md was made
 * from. It is parsed leniently on purpose: a payload recorded by an older or newer server
 * still renders (B6), and a claim kind this build does not know renders in its generic shape.
 */
export const BoardClaimSchema = z.object({
  claim_id: z.number().int(),
  /** work_claims.target_kind; an unknown kind renders as `<kind>:<compact-scope>`. */
  kind: z.string(),
  scope: z.record(z.string(), z.unknown()),
  /** The operator key of a coordination claim. */
  key: z.string().nullable().optional(),
  /** The project the claim is recorded on (steering seats and document locks name it). */
  project: z.string().nullable().optional(),
  /** PREFIX-N of the item the claim is on, or owned by (coordination claims). */
  item: z.string().nullable().optional(),
  claimed_at: z.string(),
  released_at: z.string().nullable().optional(),
  /**
   * W7: set while the claim is a waiting-line turn reserved for this session and not yet taken
   * (a reservation, not a hold). B6: absent from payloads recorded before it was read.
   */
  reserved_until: z.string().nullable().optional(),
});
export type BoardClaim = z.infer<typeof BoardClaimSchema>;

export const BoardSessionSchema = z.object({
  session_id: z.string(),
  actor_id: z.string(),
  project: z.string().nullable().optional(),
  machine_id: z.string().nullable().optional(),
  harness: z.string().optional(),
  offered_at: z.string(),
  heartbeat_at: z.string().optional(),
  ended_at: z.string().nullable().optional(),
  claims: z.array(BoardClaimSchema),
});
export type BoardSession = z.infer<typeof BoardSessionSchema>;

/** One steering seat and one document lock of the same session and project that belong together (B5). */
export const DocPairingSchema = z.object({ seat_claim_id: z.number().int(), lock_claim_id: z.number().int() });
export type DocPairing = z.infer<typeof DocPairingSchema>;

export const BoardPayloadSchema = z.object({
  generated_at: z.string(),
  project: z.string().nullable().optional(),
  active_sessions: z.array(BoardSessionSchema),
  recent_sessions: z.array(BoardSessionSchema),
  /** B6: absent from payloads recorded before the pairing read existed. */
  doc_pairings: z.array(DocPairingSchema).optional(),
});
export type BoardPayload = z.infer<typeof BoardPayloadSchema>;
