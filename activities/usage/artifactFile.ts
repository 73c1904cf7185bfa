import { closeSync, constants, fstatSync, openSync, statSync, type Stats } from 'node:fs';
import { usageError } from '../../domain/errors';

/**
 * A usage artifact must be a regular file. A FIFO blocks its reader until a writer comes (a
 * synchronous open or read then stalls the whole worker, heartbeats and SIGTERM included), and
 * a device such as /dev/zero never ends; neither is a transcript. A path that does not exist
 * is "no source yet" (the fold says unavailable), not a mistake.
 */
function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

function notRegular(path: string, st: Stats) {
  return usageError('artifact_not_regular_file', `--artifact ${path} is ${kindOf(st)}, not a regular file`, {
    recovery: 'pass the transcript, rollout or result capture file itself (a regular file)',
    details: { artifact: path, kind: kindOf(st) },
  });
}

/** Refuses (artifact_not_regular_file, exit 2) any artifact that exists and is not a regular file. */
export function assertRegularArtifacts(paths: string[]): void {
  for (const path of paths) {
    let st: Stats;
    try {
      st = statSync(path);
    } catch {
      continue; // not there (yet): no source
    }
    if (!st.isFile()) throw notRegular(path, st);
  }
}

/**
 * Opens an artifact for reading without ever blocking: O_NONBLOCK makes a FIFO's open return at
 * once, and the descriptor's own type is checked, so a path swapped for a FIFO or device after
 * the check above is still refused before anything is read from it.
 */
export function openRegularFile(path: string): { fd: number; size: number } {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw notRegular(path, st);
  }
  return { fd, size: st.size };
}
