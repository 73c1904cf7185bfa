import { Command, CommanderError } from 'commander';
import { usageError } from '../domain/errors';
import { registerActors } from './commands/actors';
import { registerAdmin } from './commands/admin';
import { registerApply } from './commands/apply';
import { registerBoard } from './commands/board';
import { registerPathClaims } from './commands/claimPrimitives';
import { registerServe } from './commands/serve';
import { registerDeploymentRuns } from './commands/deploymentRuns';
import { registerClaims } from './commands/claims';
import { registerCoordinationClaim } from './commands/coordinationClaim';
import { registerProjects } from './commands/projects';
import { registerQa } from './commands/qa';
import { registerSessions } from './commands/sessions';
import { registerTestMachine } from './commands/testMachine';
import { registerUsage } from './commands/usage';
import { registerUsageViews } from './commands/usageViews';
import { registerItems } from './commands/items';
import { registerDoctor } from './commands/doctor';
import { databaseUrlInUse } from './context';
import { asYokeError, report } from './output';

const json = process.argv.includes('--json');

function buildProgram(): Command {
  const program = new Command('yoke')
    .description('coordination claims, test-machine waiting lines and deployment runs for humans and coding agents')
    .version(require('../../package.json').version as string)
    .showSuggestionAfterError(true);
  registerActors(program);
  registerProjects(program);
  registerSessions(program);
  registerClaims(program);
  registerCoordinationClaim(program);
  registerTestMachine(program);
  registerApply(program);
  registerDeploymentRuns(program);
  registerQa(program);
  registerUsage(program);
  registerUsageViews(program);
  registerAdmin(program);
  registerBoard(program);
  registerPathClaims(program);
  registerItems(program);
  registerDoctor(program);
  registerServe(program);
  // Usage errors go through the same reporter as refusals, so --json callers get JSON.
  const quiet = (cmd: Command): void => {
    cmd.exitOverride().configureOutput({ outputError: () => undefined });
    cmd.commands.forEach(quiet);
  };
  quiet(program);
  return program;
}

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
