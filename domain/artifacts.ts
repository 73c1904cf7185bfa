import { z } from 'zod';

/**
 * C10: artifacts a run member uploads are stored in Postgres, so their size is bounded (the
 * database's CHECK says the same number): a file past it is refused before it is read.
 */
export const ARTIFACT_MAX_BYTES = 8 * 1024 * 1024;

/** An artifact's name: a file name (no path), as the database's CHECK allows. */
export const ArtifactName = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[^/\x00-\x1f]+$/, 'a file name: no "/" or control characters')
  .refine((n) => n !== '.' && n !== '..', 'a file name, not "." or ".."');
