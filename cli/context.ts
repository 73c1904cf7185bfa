import { z } from 'zod';
import type { Store } from '../activities/store';
import { usageError } from '../domain/errors';
import { MAX_SESSION_ID, sessionIdProblem } from '../domain/sessionRefusals';
import { loadConfig, type YokeConfig } from '../config/yokeConfig';
import type { LineNotifier } from '../activities/waitingLine';
import { asYokeError, emit } from './output';
import { LazyTemporal, yokeErrorFromFailure } from './temporal';
import { MAX_CONTEXT_WINDOW } from '../domain/contextWindow';

/** What every command runs with: the configuration, an open database, Temporal on demand. */
export interface CommandContext {
  config: YokeConfig;
  db: Store;
  temporal: LazyTemporal;
  /** Waiting-line settings for activities the CLI runs in-process (W7 wakes go through Temporal). */
  line: { reservationLifetimeMs: number; notifier: LineNotifier };
  /** R1: the deployment's driver freshness as Postgres holds it (read once, on first use), so the CLI and the database agree. */
  driverFreshMs(): Promise<number>;
  /** The same, read again on every call: for `yoke serve`, which outlives a worker restart. */
  readDriverFreshMs(): Promise<number>;
}

let lastDatabaseUrl: string | undefined;

export function databaseUrlInUse(): string | undefined {
  return lastDatabaseUrl;
}

/** `connections`: how many statements the command runs at once (a backfill folds on every core). */
export async function withDb<T>(
  fn: (ctx: CommandContext) => Promise<T>,
  options: { connections?: number } = {},
): Promise<T> {
  const config = loadConfig();
  lastDatabaseUrl = config.databaseUrl;
  // Loaded on first use: commands that never touch the store (help, status line) skip pg and kysely.
  const { openStore } = await import('../activities/store');
  const db = openStore(config.databaseUrl, options);
  const temporal = new LazyTemporal(config);
  let freshMs: Promise<number> | undefined;
  // The CLI's own YOKE_DRIVER_FRESH_SECONDS, when set, rules what the CLI decides (as
  // YOKE_RESERVATION_LIFETIME_SECONDS does); Postgres still holds users to the recorded setting.
  const readDriverFreshMs = () =>
    config.driverFreshExplicit
      ? Promise.resolve(config.driverFreshMs)
      : import('../activities/deploymentSettings').then((m) => m.driverFreshMs(db, config.driverFreshMs));
  const driverFreshMs = () => (freshMs ??= readDriverFreshMs());
  try {
    return await fn({
      config,
      db,
      temporal,
      line: { reservationLifetimeMs: config.reservationLifetimeMs, notifier: temporal.lineNotifier() },
      driverFreshMs,
      readDriverFreshMs,
    });
  } catch (err) {
    throw asYokeError(yokeErrorFromFailure(err) ?? err, config.databaseUrl);
  } finally {
    await temporal.close();
    await db.destroy();
  }
}

/** The acting session: --session S, else YOKE_SESSION_ID. */
export function actingSession(opts: { session?: string }): string {
  const id = opts.session ?? process.env.YOKE_SESSION_ID;
  // a blank YOKE_SESSION_ID is no session given, as an empty --session is
  if (!id || !id.trim()) {
    throw usageError('session_required', 'this command acts as a session, and none was given', {
      recovery:
        'pass --session S or set YOKE_SESSION_ID (register one with: yoke sessions register --session S --actor A)',
    });
  }
  // no session is registered under a longer id, or one with a control character, so it is bad
  // input, not an unregistered session whose recovery (register it) would be refused too
  const problem = sessionIdProblem(id);
  if (problem) {
    const length = [...id].length; // as Postgres counts it
    const tooLong = length > MAX_SESSION_ID;
    throw usageError('invalid_argument', `--session: ${problem}`, {
      recovery: tooLong
        ? 'pass the id the session was registered with (yoke sessions list shows them)'
        : 'pass the id without them, e.g. --session s1',
      details: { option: '--session', ...(tooLong ? { length } : {}) },
    });
  }
  return id;
}

/** C11: commands run from an agent hook are marked so; operator releases refuse there. */
export function inHookContext(): boolean {
  const v = process.env.YOKE_HOOK_CONTEXT;
  return v !== undefined && v !== '' && v !== '0' && v.toLowerCase() !== 'false';
}

/** Parses options with zod, turning the first problem into a usage error naming the flag. */
export function parseOptions<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const flag = issue.path.length
    ? `--${String(issue.path[0]).replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`
    : 'input';
  const empty = isEmptyValue(issue);
  throw usageError('invalid_argument', `${flag}: ${plainMessage(issue)}`, {
    recovery: empty
      ? `give ${flag} a value (see --help for the command)`
      : 'correct the value (see --help for the command)',
    details: { option: flag },
  });
}

/** An empty (or blank, once trimmed) string where a value is required. */
function isEmptyValue(issue: z.core.$ZodIssue): boolean {
  return issue.code === 'too_small' && issue.origin === 'string' && Number(issue.minimum) === 1;
}

/**
 * zod's own wording for a bound ("Too small: expected string to have >=1 characters") said the
 * way a person reads a command line; a message a schema wrote itself is kept as it is.
 */
function plainMessage(issue: z.core.$ZodIssue): string {
  if (isEmptyValue(issue)) return 'an empty value is not accepted';
  if (!/^Too (small|big):/.test(issue.message)) return issue.message;
  if (issue.code === 'too_small') {
    const bound = issue.inclusive ? 'at least' : 'more than';
    return issue.origin === 'string' ? `${bound} ${issue.minimum} characters` : `must be ${bound} ${issue.minimum}`;
  }
  if (issue.code === 'too_big') {
    const bound = issue.inclusive ? 'at most' : 'less than';
    return issue.origin === 'string' ? `${bound} ${issue.maximum} characters` : `must be ${bound} ${issue.maximum}`;
  }
  return issue.message;
}

/**
 * A number as a person writes it: decimal digits (with a fraction where `fraction`), never `0x10`,
 * `1e3` or a blank, which JavaScript's Number() reads as 16, 1000 and 0. Pipe it into the bounds.
 */
export function decimalNumber(message: string, fraction = false) {
  return z
    .union([
      z.number(),
      z
        .string()
        .trim()
        .regex(fraction ? /^[0-9]+(\.[0-9]+)?$/ : /^[0-9]+$/, message),
    ])
    .transform(Number);
}

/** Ids are decimal digits only: `0x10` or `1e3` are not 16 and 1000. `what` names the id in the message. */
export function decimalIdSchema(what: string) {
  // The id's own bound first: a value past it is reported against that bound, not the safe-integer one.
  return decimalNumber(`${what} is decimal digits`).pipe(z.number().max(2_147_483_647).int().positive());
}

/** A whole-number option (a port, a window, milliseconds). */
export const wholeNumber = decimalNumber('expected decimal digits, e.g. 30');
/** A context window in tokens (--window): a positive whole number its integer columns hold. */
export const contextWindow = wholeNumber.pipe(
  z.number().int().positive().max(MAX_CONTEXT_WINDOW, `a context window is at most ${MAX_CONTEXT_WINDOW} tokens`),
);
/** A duration in seconds, fractions allowed (1.5). */
export const seconds = decimalNumber('expected seconds as a decimal number, e.g. 30 or 1.5', true);
export const claimIdSchema = decimalIdSchema('a claim id');

/** Parses one positional argument with zod, naming it as `--help` shows it (e.g. EXECUTION) in the usage error. */
export function parseArgument<S extends z.ZodType>(name: string, schema: S, value: unknown): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const argument = name.toUpperCase();
  throw usageError('invalid_argument', `${argument}: ${plainMessage(parsed.error.issues[0]!)}`, {
    recovery: 'correct the value (see --help for the command)',
    // `option` is what these details said before the argument was named (kept for readers of it).
    details: { argument, value, option: `--${name}` },
  });
}
export const nonEmpty = z.string().trim().min(1);

/** The options every command accepts (program.ts adds the flags where a command does not declare them). */
export const BaseOptions = z.object({ session: nonEmpty.optional(), json: z.boolean().optional() });

/** `watch`'s options: how often to read (ms) and when to stop watching (s). */
export const WatchOptions = BaseOptions.extend({
  intervalMs: wholeNumber.pipe(z.number().int().min(50)),
  timeout: seconds.pipe(z.number().positive()),
});

/**
 * The one shape of a command's action: commander hands over the positional arguments, then the
 * options (a variadic argument's values end the list); the options are parsed with `schema` (a bad value is `invalid_argument` naming the
 * flag), `run` acts on an open store, and the result is printed as JSON with --json, else as
 * `render` writes it for a person. `json` shapes the JSON when it is not the result itself.
 */
export function commandAction<S extends z.ZodType<{ json?: boolean }>, R>(
  schema: S,
  run: (ctx: CommandContext, o: z.infer<S>, args: string[]) => Promise<R>,
  render: (r: R, o: z.infer<S>, args: string[]) => string,
  json: (r: R) => unknown = (r) => r,
): (...commanderArgs: unknown[]) => Promise<void> {
  return async (...commanderArgs) => {
    // commander calls an action with the positional arguments, the options, then the Command. A
    // variadic argument (always the last) arrives as an array: flattened, `args` ends with its values.
    const args = (commanderArgs.slice(0, -2) as (string | string[])[]).flat();
    const o = parseOptions(schema, commanderArgs[commanderArgs.length - 2]);
    const r = await withDb((ctx) => run(ctx, o, args));
    emit(!!o.json, json(r), () => render(r, o, args));
  };
}
