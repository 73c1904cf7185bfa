import { posix } from 'node:path';
import { usageError } from './errors';

/**
 * An item's lane checkout (`yoke items update PREFIX-N lane PATH`). Settlement's lane cleanup
 * (S3) removes it recursively wherever the settling process runs, so only a path that can name
 * one checkout is kept: absolute (a relative one would resolve against whichever process's
 * working directory settles, `.` being that directory itself), without `..`, and at least two
 * levels below the root (never `/`, `/home` or `/tmp` themselves).
 */
export function parseLanePath(raw: string): string {
  const trimmed = raw.trim();
  const refuse = (rule: string) =>
    usageError('invalid_lane_path', `lane: "${raw}" ${rule}`, {
      recovery: "give the absolute path of the item's own checkout, e.g. yoke items update WEB-1 lane /srv/lanes/web-1",
      details: { field: 'lane', value: raw },
    });
  if (!posix.isAbsolute(trimmed)) throw refuse('is not an absolute path');
  if (trimmed.split('/').includes('..')) throw refuse('contains ".."');
  if (trimmed.length > 4096 || /[\0-\x1f]/.test(trimmed)) throw refuse('is too long or holds control characters');
  const lane = posix.normalize(trimmed).replace(/\/+$/, '');
  if (lane.split('/').filter(Boolean).length < 2) throw refuse('is a top-level directory, not one checkout');
  return lane;
}
