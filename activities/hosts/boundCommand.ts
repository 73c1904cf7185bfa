/**
 * A remote command that dies with its SSH connection. Without a terminal, sshd does not signal
 * a command whose client went away (a worker killed mid-case, a command timeout, a cancelled
 * activity): it ran on, on a machine the line had already given to its next holder, or beside
 * the same case run again. sshd starts every command as the leader of a session and process
 * group of its own; the wrapper keeps that (it execs) and runs the command in its foreground,
 * under the login shell (`$SHELL -c`) as sshd did, with stdin from /dev/null (yoke never
 * writes to it). A background watcher reads the channel's stdin instead, which yoke never
 * closes: end of file there means the connection is gone, and the watcher sends the whole
 * group TERM, then KILL 5 s later for anything that ignored TERM.
 *
 * A command killed by one of the usual fatal signals is reported as that signal (the wrapper
 * re-raises it on itself), so a command that exits 128+N for such an N is reported as signal N
 * too; any other status is passed on as it is. Where the wrapper is not its group's leader
 * (another SSH server) or the host has no /proc, the command runs as before, unwatched.
 */
const FATAL_STATUSES = '129|130|131|134|137|138|139|140|141|142|143'; // 128 + HUP INT QUIT ABRT KILL USR1 SEGV USR2 PIPE ALRM TERM

const WATCHED = [
  'pgrp=; read -r _ _ _ _ pgrp _ 2>/dev/null </proc/$$/stat',
  '[ "$pgrp" = "$$" ] || exec "${SHELL:-/bin/sh}" -c "$1"',
  'exec 3<&0 </dev/null',
  '{ cat <&3 >/dev/null; trap "" TERM; kill -TERM "-$$"; sleep 5; kill -KILL "-$$"; } >/dev/null 2>&1 &',
  'watcher=$!',
  'exec 3<&-',
  '"${SHELL:-/bin/sh}" -c "$1"; status=$?',
  'kill "$watcher" 2>/dev/null',
  `case "$status" in ${FATAL_STATUSES}) kill "-$((status - 128))" "$$" ;; esac`,
  'exit "$status"',
].join('\n');

const quoted = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;

/** `command` wrapped so that it dies when its connection does (see above). */
export function boundToConnection(command: string): string {
  return `exec /bin/sh -c ${quoted(WATCHED)} yoke-remote ${quoted(command)}`;
}
