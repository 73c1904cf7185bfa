/**
 * Default bounds, each defined once: the configuration (config/yokeConfig.ts) takes its defaults
 * from here, and activities built without a configuration (tests, benches) fall back to the same.
 */

/** SSH to a host: how long to connect, how long one command may run. */
export const DEFAULT_SSH_TIMEOUTS = { connectTimeoutMs: 10_000, commandTimeoutMs: 600_000 } as const;

/** A run driver's heartbeat is fresh this long; after it another session may take over driving (R1). */
export const DEFAULT_DRIVER_FRESH_MS = 600_000;

/** How long a takeover waits for the locks it needs before refusing `takeover_lock_timeout`. */
export const DEFAULT_TAKEOVER_LOCK_TIMEOUT_MS = 5_000;

/** W9: how long a reserved waiting-line turn waits to be consumed before it passes on. */
export const DEFAULT_RESERVATION_LIFETIME_MS = 300_000;

/** Q5: one blocking-QA read's statement deadline (YOKE_QA_READ_DEADLINE_MS). */
export const DEFAULT_QA_READ_DEADLINE_MS = 5_000;
