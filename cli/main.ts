import { CommanderError } from 'commander';
import { usageError } from '../domain/errors';
import { buildProgram } from './program';
import { databaseUrlInUse } from './context';
import { asYokeError, endQuietlyWhenOutputCloses, report } from './output';

const json = process.argv.includes('--json');
endQuietlyWhenOutputCloses();

/**
 * Every command takes the base options `--json` and `--session S`; written before the command
 * (`yoke --json projects list`) they are the command's own, so they move behind it (before a `--`).
 */
function baseOptionsLast(argv: string[]): string[] {
  const [node, script, ...args] = argv;
  const leading: string[] = [];
  while (args.length) {
    const a = args[0]!;
    if (a === '--json' || a.startsWith('--session=')) leading.push(...args.splice(0, 1));
    else if (a === '--session' && args.length > 1) leading.push(...args.splice(0, 2));
    else break;
  }
  if (!leading.length || !args.length) return argv;
  const end = args.indexOf('--');
  if (end < 0) args.push(...leading);
  else args.splice(end, 0, ...leading);
  return [node!, script!, ...args];
}

async function main(): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(baseOptionsLast(process.argv));
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help')
        return 0;
      const message = err.message.replace(/^error: /, '');
      return report(
        usageError('usage', message, {
          recovery: 'see `yoke --help` or `yoke <command> --help`',
          details: { commander_code: err.code },
        }),
        json,
      );
    }
    if (process.env.YOKE_DEBUG) console.error(err);
    return report(asYokeError(err, databaseUrlInUse()), json);
  }
}

main().then(
  (code) => {
    // A command that finished but reports a status of its own (watch: 1 or 5, advance: 5) keeps it.
    process.exitCode = code === 0 ? (process.exitCode ?? 0) : code;
  },
  (err: unknown) => {
    // report() itself failed (stderr closed?): still exit non-zero.
    process.stderr.write(`${String(err)}\n`);
    process.exitCode = 1;
  },
);
