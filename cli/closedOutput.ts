// A module of its own, with no imports: the status-line hook (bin/yoke's fast path) installs it
// without loading the rest of the CLI's output code.

/**
 * A reader that closes our output early (`yoke ... --json | head -1`) is not an error: the
 * write that finds the pipe closed fails with EPIPE, which unhandled would crash with a stack
 * trace. It ends the process quietly instead, exit 0 as for a reader that has what it wanted
 * (a status the command already set is kept). Installed once, for stdout and stderr, before
 * any command writes.
 */
export function endQuietlyWhenOutputCloses(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
      throw err;
    });
  }
}
