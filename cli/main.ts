import { CommanderError } from 'commander';
import { usageError } from '../domain/errors';
import { buildProgram } from './program';
import { databaseUrlInUse } from './context';
import { asYokeError, endQuietlyWhenOutputCloses, report } from './output';

const json = process.argv.includes('--json');
endQuietlyWhenOutputCloses();

async function main(): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(process.argv);
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
