import { parentPort } from 'node:worker_threads';
import type { FoldJob } from './foldPool';
import { fold } from './readers';

/** One thread of the fold pool (foldPool.ts): folds the sessions it is handed, one at a time. */
parentPort!.on('message', (m: { id: number; job: FoldJob }) => {
  fold(m.job.harness, m.job.previous, m.job.artifacts).then(
    (reading) => parentPort!.postMessage({ id: m.id, reading }),
    (err: Error) => parentPort!.postMessage({ id: m.id, error: err.message }),
  );
});
