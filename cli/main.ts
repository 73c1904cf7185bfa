import { type Command, CommanderError } from 'commander';
import { usageError, type YokeError } from '../domain/errors';
import { buildProgram } from './program';
import { databaseUrlInUse } from './context';
import { asYokeError, endQuietlyWhenOutputCloses, report } from './output';

const json = process.argv.includes('--json');
endQuietlyWhenOutputCloses();

/**
 * Every command takes the base options `--json` and `--session S`; written before the command or
 * between its words (`yoke --json projects list`, `yoke claims --json list`) they are the
 * command's own, so they move behind it (before a `--`). Also returns the group the words stop at
 * when they name no command of it (`yoke --json claims`).
 */
function baseOptionsLast(program: Command, argv: string[]): { argv: string[]; bareGroup: Command | null } {
  const [node, script, ...args] = argv;
  const words: string[] = [];
  const moved: string[] = [];
  let cmd = program;
  while (args.length && !(cmd !== program && !cmd.commands.length)) {
    const a = args[0]!;
    if (a === '--json' || a.startsWith('--session=')) moved.push(...args.splice(0, 1));
    else if (a === '--session' && args.length > 1) moved.push(...args.splice(0, 2));
    else {
      const sub = cmd.commands.find((c) => c.name() === a || c.aliases().includes(a));
      if (!sub) break;
      words.push(...args.splice(0, 1));
      cmd = sub;
    }
  }
  const bareGroup = cmd.commands.length && !args.length ? cmd : null;
  if (!moved.length) return { argv, bareGroup };
  const end = args.indexOf('--');
  if (end < 0) args.push(...moved);
  else args.splice(end, 0, ...moved);
  return { argv: [node!, script!, ...words, ...args], bareGroup };
}

/** `yoke claims` names no command: with --json that is a usage error naming the commands it has. */
function commandMissing(group: Command): YokeError {
  const path: string[] = [];
  for (let c: Command | null = group; c?.parent; c = c.parent) path.unshift(c.name());
  const named = ['yoke', ...path].join(' ');
  const commands = group.commands.map((c) => c.name()).filter((n) => n !== 'help');
  return usageError('command_missing', `${named} needs a command: one of ${commands.join(', ')}`, {
    recovery: `name one, e.g. ${named} ${commands[0]} --help (see ${named} --help)`,
    details: { command: named, commands },
  });
}

async function main(): Promise<number> {
  const program = buildProgram();
  const { argv, bareGroup } = baseOptionsLast(program, process.argv);
  if (json && bareGroup) return report(commandMissing(bareGroup), json);
  try {
    await program.parseAsync(argv);
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
