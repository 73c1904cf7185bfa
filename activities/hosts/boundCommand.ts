/**
 * A remote command that dies with its SSH connection. Without a terminal, sshd does not signal
 * a command whose client went away (a worker killed mid-case, a command timeout, a cancelled
 * activity): it ran on, on a machine the line had already given to its next holder, or beside
 * the same case run again. The wrapper runs the command in a session of its own and watches
 * the channel's stdin, which yoke never writes or closes: end of file there means the
 * connection is gone, and the command's process group is sent TERM, then KILL after a grace.
 *
 * The command still runs under the login shell (`$SHELL -c`), as sshd ran it before, with
 * stdin from /dev/null (nothing ever wrote to it). A command killed by a signal is reported as
 * that signal (the wrapper re-raises it on itself), so a command that exits 128+N by itself is
 * reported as signal N too. A host without `setsid` runs the command as before, unwatched.
 */
const WATCHED = [
  'command -v setsid >/dev/null 2>&1 || exec "${SHELL:-/bin/sh}" -c "$1"',
  'exec 3<&0',
  'setsid "${SHELL:-/bin/sh}" -c "$1" </dev/null 3<&- &',
  'job=$!',
  '{ cat >/dev/null; kill -TERM "-$job"; sleep 5; kill -KILL "-$job"; } <&3 >/dev/null 2>&1 &',
  'watcher=$!',
  'exec 3<&-',
  'wait "$job"; status=$?',
  'kill "$watcher" 2>/dev/null',
  'if [ "$status" -gt 128 ]; then kill "-$((status - 128))" "$$"; fi',
  'exit "$status"',
].join('\n');

const quoted = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;

/** `command` wrapped so that it dies when its connection does (see above). */
export function boundToConnection(command: string): string {
  return `exec /bin/sh -c ${quoted(WATCHED)} yoke-remote ${quoted(command)}`;
}
