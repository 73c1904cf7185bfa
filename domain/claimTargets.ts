import { usageError } from './errors';

/**
 * Names of the claim primitives the board shows beside items and steering seats: an epic
 * task (T###), a process key (FEED), a claimed path, a strategy document (MISSION).
 */
const TASK = /^T[0-9]{3,6}$/;
const PROCESS_KEY = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/;
const DOCUMENT = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

function invalid(field: string, value: string, rule: string, example: string) {
  return usageError('invalid_argument', `${field}: "${value}" ${rule}`, {
    recovery: `correct it, for example ${example}`,
    details: { option: field, value },
  });
}

export function parseTask(raw: string): string {
  const task = raw.trim().toUpperCase();
  if (!TASK.test(task)) throw invalid('TASK', raw, 'is not an epic task id (T followed by 3 to 6 digits)', 'T008');
  return task;
}

export function parseProcessKey(raw: string): string {
  const key = raw.trim();
  if (!PROCESS_KEY.test(key))
    throw invalid('PROCESS_KEY', raw, 'is not a process key (letters, digits and . _ : -)', 'FEED');
  return key;
}

export function parseDocument(raw: string): string {
  const doc = raw.trim();
  if (!DOCUMENT.test(doc)) throw invalid('DOC', raw, 'is not a document name (letters, digits and . _ -)', 'MISSION');
  return doc;
}

/**
 * A repository-relative path, one spelling per file (exclusivity is by the stored path):
 * `.` segments, repeated slashes and a trailing slash dropped; no `..`, no absolute path.
 */
export function normalizePath(raw: string): string {
  const trimmed = raw.trim();
  const path = trimmed
    .split('/')
    .filter((segment) => segment !== '' && segment !== '.')
    .join('/');
  if (!path || trimmed.startsWith('/') || path.split('/').includes('..') || path.length > 1000)
    throw invalid('PATH', raw, 'is not a repository-relative path', 'src/board/render.ts');
  return path;
}
