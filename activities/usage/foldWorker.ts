import { parentPort, workerData } from 'node:worker_threads';
import type { FoldJob, FoldWorkerData } from './foldPool';
import { fold, foldingInBulk } from './readers';

foldingInBulk((workerData as FoldWorkerData).share);

/** One thread of the fold pool (foldPool.ts): folds the sessions it is handed, each as it arrives (they interleave only where a long scan yields, each with its own buffer). */
parentPort!.on('message', (m: { id: number; job: FoldJob }) => {
  fold(m.job.harness, m.job.previous, m.job.artifacts).then(
    (reading) => parentPort!.postMessage({ id: m.id, reading }),
    (err: Error) => parentPort!.postMessage({ id: m.id, error: err.message }),
  );
});
