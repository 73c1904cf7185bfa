import {
  DEFAULT_DRIVER_FRESH_MS,
  DEFAULT_QA_READ_DEADLINE_MS,
  DEFAULT_RESERVATION_LIFETIME_MS,
  DEFAULT_SSH_TIMEOUTS,
  DEFAULT_TAKEOVER_LOCK_TIMEOUT_MS,
} from '../domain/timeouts';
import { existsSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { usageError } from '../domain/errors';
import { DATABASE_URL_FORMS, readableDatabaseUrl } from './databaseUrl';

/**
 * Configuration, parsed once at the edge (DESIGN.md principle 5). Environment variables
 * select real deployments; with nothing set, the values `npm start` recorded in
 * `.yoke/services.json` are used, then the local defaults.
 */
/** A postgres:// URL, made readable (config/databaseUrl.ts): libpq's empty host is taken too. */
const DatabaseUrl = z.string().transform((raw, ctx) => {
  const url = readableDatabaseUrl(raw);
  if (url === undefined)
    ctx.addIssue({
      code: 'custom',
      message: `expected a postgres:// or postgresql:// URL, e.g. ${DATABASE_URL_FORMS}`,
    });
  return url ?? z.NEVER;
});

const Env = z.object({
  DATABASE_URL: DatabaseUrl.optional(),
  YOKE_WORKER_DATABASE_URL: DatabaseUrl.optional(),
  TEMPORAL_ADDRESS: z.string().min(1).optional(),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  TEMPORAL_API_KEY: z.string().min(1).optional(),
  TEMPORAL_TLS: z.enum(['0', '1', 'true', 'false']).optional(),
  TEMPORAL_TLS_CERT: z.string().min(1).optional(),
  TEMPORAL_TLS_KEY: z.string().min(1).optional(),
  TEMPORAL_TLS_CA: z.string().min(1).optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().min(1).optional(),
  YOKE_HOME: z.string().min(1).optional(),
  YOKE_TASK_QUEUE: z.string().min(1).default('yoke'),
  YOKE_SESSION_STALE_AFTER_SECONDS: z.coerce.number().positive().default(900),
  YOKE_SWEEP_INTERVAL_SECONDS: z.coerce.number().positive().default(60),
  YOKE_RESERVATION_LIFETIME_SECONDS: z.coerce.number().positive().optional(),
  YOKE_SSH_CONNECT_TIMEOUT_SECONDS: z.coerce
    .number()
    .positive()
    .default(DEFAULT_SSH_TIMEOUTS.connectTimeoutMs / 1000),
  YOKE_SSH_COMMAND_TIMEOUT_SECONDS: z.coerce
    .number()
    .positive()
    .default(DEFAULT_SSH_TIMEOUTS.commandTimeoutMs / 1000),
  YOKE_SSH_KEY_DIR: z.string().min(1).optional(),
  YOKE_DRIVER_FRESH_SECONDS: z.coerce
    .number()
    .positive()
    .default(DEFAULT_DRIVER_FRESH_MS / 1000),
  YOKE_CREATE_TIMEOUT_SECONDS: z.coerce.number().positive().default(60),
  YOKE_TAKEOVER_LOCK_TIMEOUT_MS: z.coerce.number().int().positive().default(DEFAULT_TAKEOVER_LOCK_TIMEOUT_MS),
  YOKE_QA_READ_DEADLINE_MS: z.coerce.number().int().positive().default(DEFAULT_QA_READ_DEADLINE_MS),
  YOKE_APPLY_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(1024 * 1024),
});

const Recorded = z
  .object({
    databaseUrl: z.string().optional(),
    temporalAddress: z.string().optional(),
    temporalNamespace: z.string().optional(),
    /** Issue 3: the worker's reservation lifetime, so a CLI release reserves for as long as the worker's. */
    reservationLifetimeSeconds: z.number().positive().optional(),
  })
  .partial();

export interface TlsFiles {
  cert?: string;
  key?: string;
  ca?: string;
  serverName?: string;
}

export interface YokeConfig {
  home: string;
  databaseUrl: string;
  /** Issue 13: the worker's own connection (a login in yoke_worker); default databaseUrl. */
  workerDatabaseUrl: string;
  temporal: {
    address: string;
    namespace: string;
    apiKey?: string;
    /** false: plaintext (the dev server); true or files: TLS (a real cluster, Temporal Cloud). */
    tls: false | true | TlsFiles;
  };
  taskQueue: string;
  staleAfterMs: number;
  sweepIntervalMs: number;
  /** W9: how long a reserved waiting-line turn waits to be consumed before it passes on. */
  reservationLifetimeMs: number;
  /** keyDir (issue 13): the worker's SSH keys, named by test machines and deploy hosts (--credential NAME). */
  ssh: { connectTimeoutMs: number; commandTimeoutMs: number; keyDir: string };
  /** R1: how long a driver's heartbeat keeps its attachment live. */
  driverFreshMs: number;
  /** Whether YOKE_DRIVER_FRESH_SECONDS was set for this process (else the deployment's recorded setting rules). */
  driverFreshExplicit: boolean;
  /** I2: how long the CLI waits for a create before repeating it once under the same key. */
  createTimeoutMs: number;
  /** T3: how long a takeover waits for a run or execution row lock before refusing takeover_lock_timeout. */
  takeoverLockTimeoutMs: number;
  /** The largest project definition `yoke apply` reads. */
  applyMaxBytes: number;
  /** Q5: one blocking-QA read's deadline. */
  qaReadDeadlineMs: number;
}

export {
  DEFAULT_DATABASE_URL,
  DEFAULT_TEMPORAL_ADDRESS,
  projectRoot,
  servicesFile,
  sshKeyDir,
  yokeHome,
} from './paths';
import { DEFAULT_DATABASE_URL, DEFAULT_TEMPORAL_ADDRESS, servicesFile, sshKeyDir, yokeHome } from './paths';

function readRecorded(home: string): z.infer<typeof Recorded> {
  const file = servicesFile(home);
  if (!existsSync(file)) return {};
  const parsed = Recorded.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  return parsed.success ? parsed.data : {};
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): YokeConfig {
  const parsed = Env.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw usageError(
      'invalid_configuration',
      `environment variable ${issue.path.join('.')} is invalid: ${issue.message}`,
      {
        recovery: 'fix or unset it (see README, Configuration)',
        details: { variable: issue.path.join('.') },
      },
    );
  }
  const e = parsed.data;
  const home = yokeHome({ YOKE_HOME: e.YOKE_HOME });
  const recorded = readRecorded(home);
  const files: TlsFiles = {
    cert: e.TEMPORAL_TLS_CERT,
    key: e.TEMPORAL_TLS_KEY,
    ca: e.TEMPORAL_TLS_CA,
    serverName: e.TEMPORAL_TLS_SERVER_NAME,
  };
  const hasFiles = Object.values(files).some((v) => v !== undefined);
  const tlsOn = e.TEMPORAL_TLS === '1' || e.TEMPORAL_TLS === 'true' || e.TEMPORAL_API_KEY !== undefined;
  return {
    home,
    databaseUrl: e.DATABASE_URL ?? recorded.databaseUrl ?? DEFAULT_DATABASE_URL,
    workerDatabaseUrl: e.YOKE_WORKER_DATABASE_URL ?? e.DATABASE_URL ?? recorded.databaseUrl ?? DEFAULT_DATABASE_URL,
    temporal: {
      address: e.TEMPORAL_ADDRESS ?? recorded.temporalAddress ?? DEFAULT_TEMPORAL_ADDRESS,
      namespace: env.TEMPORAL_NAMESPACE ? e.TEMPORAL_NAMESPACE : (recorded.temporalNamespace ?? e.TEMPORAL_NAMESPACE),
      apiKey: e.TEMPORAL_API_KEY,
      tls: hasFiles ? files : tlsOn,
    },
    taskQueue: e.YOKE_TASK_QUEUE,
    staleAfterMs: e.YOKE_SESSION_STALE_AFTER_SECONDS * 1000,
    sweepIntervalMs: e.YOKE_SWEEP_INTERVAL_SECONDS * 1000,
    reservationLifetimeMs:
      (e.YOKE_RESERVATION_LIFETIME_SECONDS ??
        recorded.reservationLifetimeSeconds ??
        DEFAULT_RESERVATION_LIFETIME_MS / 1000) * 1000,
    ssh: {
      connectTimeoutMs: e.YOKE_SSH_CONNECT_TIMEOUT_SECONDS * 1000,
      commandTimeoutMs: e.YOKE_SSH_COMMAND_TIMEOUT_SECONDS * 1000,
      keyDir: sshKeyDir({ YOKE_SSH_KEY_DIR: e.YOKE_SSH_KEY_DIR, YOKE_HOME: e.YOKE_HOME }),
    },
    driverFreshMs: e.YOKE_DRIVER_FRESH_SECONDS * 1000,
    driverFreshExplicit: env.YOKE_DRIVER_FRESH_SECONDS !== undefined,
    createTimeoutMs: e.YOKE_CREATE_TIMEOUT_SECONDS * 1000,
    takeoverLockTimeoutMs: e.YOKE_TAKEOVER_LOCK_TIMEOUT_MS,
    applyMaxBytes: e.YOKE_APPLY_MAX_BYTES,
    qaReadDeadlineMs: e.YOKE_QA_READ_DEADLINE_MS,
  };
}
