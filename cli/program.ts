import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { usageError } from '../domain/errors';
import { projectRoot } from '../config/paths';
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

/** package.json's version, read from the checkout whether this runs built (dist/cli) or from source. */
function packageVersion(): string {
  return (JSON.parse(readFileSync(join(projectRoot(__dirname), 'package.json'), 'utf8')) as { version: string })
    .version;
}

/** The whole `yoke` command table (commander), without running it. */
export function buildProgram(): Command {
  const program = new Command('yoke')
    .description('coordination claims, test-machine waiting lines and deployment runs for humans and coding agents')
    .version(packageVersion())
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
  acceptBaseOptionsEverywhere(program);
  refuseEmptyIds(program);
  // Usage errors go through the same reporter as refusals, so --json callers get JSON.
  const quiet = (cmd: Command): void => {
    cmd.exitOverride().configureOutput({ outputError: () => undefined });
    cmd.commands.forEach(quiet);
  };
  quiet(program);
  return program;
}

/**
 * Every command accepts the base options, `--json` and `--session S`, so a script can pass them to
 * any command. A command that declares neither gets them here. Where a command does not read
 * `--session` itself, the value becomes YOKE_SESSION_ID for the command, which is where the
 * readers that honour a viewing session (U13) look.
 */
function acceptBaseOptionsEverywhere(cmd: Command): void {
  if (cmd.commands.length) {
    cmd.commands.forEach(acceptBaseOptionsEverywhere);
    return;
  }
  if (cmd.name() === 'status-line') return; // a hook: its session comes in the harness's payload, it prints one line
  if (!cmd.options.some((o) => o.long === '--json')) cmd.option('--json', 'print JSON');
  if (cmd.options.some((o) => o.long === '--session')) return;
  cmd.option('--session <id>', 'the acting or viewing session (default $YOKE_SESSION_ID)');
  cmd.hook('preAction', (_this, action) => {
    const session = action.opts<{ session?: string }>().session;
    if (session !== undefined) process.env.YOKE_SESSION_ID = session;
  });
}

/** Positional arguments that name something recorded: a run, an execution, a session, a machine, actor or project. */
const ID_ARGUMENTS = new Set(['run', 'execution', 'session', 'name']);

/**
 * An empty RUN, EXECUTION, SESSION or NAME names nothing: a usage error naming the argument, before
 * anything is read (it used to read as "no deployment run has id ", an empty waiting line, or a
 * recovery command with a hole in it). `add` and `create` check the new name with their own codes.
 */
function refuseEmptyIds(cmd: Command): void {
  if (cmd.commands.length) {
    cmd.commands.forEach(refuseEmptyIds);
    return;
  }
  if (cmd.name() === 'add' || cmd.name() === 'create') return;
  cmd.hook('preAction', (_this, action) => {
    action.registeredArguments.forEach((arg, i) => {
      const value: unknown = action.processedArgs[i];
      if (!ID_ARGUMENTS.has(arg.name()) || typeof value !== 'string' || value.trim() !== '') return;
      const argument = arg.name().toUpperCase();
      const path = [];
      for (let c: Command | null = action; c?.parent; c = c.parent) path.unshift(c.name());
      throw usageError('invalid_argument', `${argument}: an empty value names nothing`, {
        // the argument's help text is a phrase of its own ("only this machine"), not a noun to quote
        recovery: arg.required
          ? `pass ${argument}, ${arg.description || arg.name()} (see yoke ${path.join(' ')} --help)`
          : `pass ${argument} (${arg.description || arg.name()}), or leave it out (see yoke ${path.join(' ')} --help)`,
        details: { argument, value },
      });
    });
  });
}
