import { readFileSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import type { Command } from 'commander';
import type { ArtifactView } from '../../activities/memberAuthority';
import { usageError } from '../../domain/errors';
import { actingSession, BaseOptions, commandAction, nonEmpty } from '../context';
import type { Store } from '../../activities/store';
import { table } from '../output';

const UploadOptions = BaseOptions.extend({ item: nonEmpty, file: nonEmpty, name: nonEmpty.optional() });

/** The file's bytes, refused before reading when it is not a file or past the stored bound. */
async function readArtifactFile(path: string, name: string): Promise<Buffer> {
  const { ARTIFACT_MAX_BYTES } = await import('../../domain/artifacts');
  let size: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new Error('not a regular file');
    size = st.size;
  } catch (err) {
    throw usageError('artifact_file_unreadable', `--file ${path}: ${(err as Error).message}`, {
      recovery: 'pass --file with the path of a readable regular file',
      details: { file: path },
    });
  }
  if (size > ARTIFACT_MAX_BYTES) {
    const { artifactTooLarge } = await import('../../activities/memberAuthority');
    throw artifactTooLarge(name, size);
  }
  return readFileSync(path);
}

const artifactRow = (a: ArtifactView) => [
  String(a.artifact_id),
  a.item,
  a.project,
  a.name,
  String(a.size_bytes),
  a.sha256.slice(0, 16),
  a.uploaded_by_session_id,
  a.uploaded_at,
];
const ARTIFACT_HEADER = ['ID', 'ITEM', 'PROJECT', 'NAME', 'BYTES', 'SHA256', 'SESSION', 'UPLOADED'];

async function memberAuthority(db: Store) {
  const { memberAuthorityActivities } = await import('../../activities/memberAuthority');
  return memberAuthorityActivities({ db });
}

/** `yoke deployment-runs artifacts upload|list` (C10): files a run member stores with the run. */
export function registerArtifacts(dr: Command): void {
  const artifacts = dr
    .command('artifacts')
    .description("files run members upload, kept under the stored member's project (C10)");

  artifacts
    .command('upload')
    .description("store a file for a member of RUN, under the member's stored project, even after its membership ended")
    .argument('<run>', 'the run the item is or was a member of')
    .requiredOption('--item <PREFIX-N>', 'the member item')
    .requiredOption('--file <path>', 'the file to store (at most 8 MiB)')
    .option('--name <name>', 'the name to store it under (default: the file name)')
    .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
    .action(
      commandAction(
        UploadOptions,
        async ({ db }, o, [runId]) => {
          const sessionId = actingSession(o);
          const name = o.name ?? basename(o.file);
          const content = await readArtifactFile(o.file, name);
          return (await memberAuthority(db)).uploadArtifact({ sessionId, runId: runId!, item: o.item, name, content });
        },
        (r) =>
          [
            `${r.replayed ? 'already stored' : 'stored'} artifact ${r.artifact.artifact_id}: ${r.artifact.name} (${r.artifact.size_bytes} bytes, sha256 ${r.artifact.sha256})`,
            `for ${r.artifact.item} in run ${r.artifact.run_id}, under project ${r.artifact.project}${r.membership.ended ? ` (membership ended: ${r.membership.ended_by})` : ''}`,
          ].join('\n'),
      ),
    );

  artifacts
    .command('list')
    .description("a run's member artifacts, oldest first")
    .argument('<run>', 'run id')
    .action(
      commandAction(
        BaseOptions,
        async ({ db }, _o, [runId]) => (await memberAuthority(db)).listArtifacts({ runId: runId! }),
        (rows) => table(ARTIFACT_HEADER, rows.map(artifactRow)),
      ),
    );
}
