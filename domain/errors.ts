/**
 * Refusals are data (DESIGN.md principle 4): every refusal the specification names is a
 * YokeError carrying the spec's code verbatim, a one-line message naming what is involved,
 * the recovery, and details. The `kind` decides the CLI exit status.
 */
export type ErrorKind = 'refusal' | 'usage' | 'unreachable' | 'held';

export const EXIT_CODES: Record<ErrorKind | 'ok', number> = {
  ok: 0,
  refusal: 1,
  usage: 2,
  unreachable: 3,
  held: 5,
};

export interface ErrorBody {
  code: string;
  message: string;
  recovery: string;
  details: Record<string, unknown>;
}

export class YokeError extends Error {
  readonly code: string;
  readonly recovery: string;
  readonly details: Record<string, unknown>;
  readonly kind: ErrorKind;

  constructor(kind: ErrorKind, code: string, message: string, recovery: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = 'YokeError';
    this.kind = kind;
    this.code = code;
    this.recovery = recovery;
    this.details = details;
  }

  toJSON(): ErrorBody {
    return { code: this.code, message: this.message, recovery: this.recovery, details: this.details };
  }
}

interface ErrorParts {
  recovery: string;
  details?: Record<string, unknown>;
}

/** The system understood the request and says no (exit 1). */
export function refusal(code: string, message: string, parts: ErrorParts): YokeError {
  return new YokeError('refusal', code, message, parts.recovery, parts.details);
}

/** The request itself is malformed (exit 2). */
export function usageError(code: string, message: string, parts: ErrorParts): YokeError {
  return new YokeError('usage', code, message, parts.recovery, parts.details);
}

/** Postgres or Temporal cannot be reached (exit 3). */
export function unreachable(code: string, message: string, parts: ErrorParts): YokeError {
  return new YokeError('unreachable', code, message, parts.recovery, parts.details);
}
