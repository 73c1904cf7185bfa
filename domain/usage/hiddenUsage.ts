/**
 * U13: the usage note of a session whose usage the viewer's actor may not read: hidden, not
 * missing, so views say "not shown" where a session with no source says "unavailable".
 */
export const HIDDEN_USAGE_NOTE = "usage not shown: your actor has no grant on this session's project (U13)";
