/**
 * The largest context window a session records (requested or served): its columns are
 * Postgres integers. A larger number is bad input, refused where a person typed it and never
 * stored from a harness's statement.
 */
export const MAX_CONTEXT_WINDOW = 2_147_483_647;
