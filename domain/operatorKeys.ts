import { usageError } from './errors';
import type { TargetKind } from './claimKinds';
import { testMachineName } from './testMachineName';

/**
 * C6: each coordination claim is addressed by one operator key.
 *   LIVE_DB_MIGRATION:<model>      migration_serialization (needs a project and an owning item)
 *   QA_HOST:<machine>              qa_admission (machine-scoped, no project; the machine name
 *                                  is case-insensitive, kept lower-case: C3)
 *   <grant>                        route_qualification: the bare qualification grant token
 *                                  (a key without ":"); ROUTE_QUALIFICATION:<grant> and
 *                                  ROUTE_GRANT:<grant> are aliases (and the only way to
 *                                  name a token that contains ":"). Stored and listed as
 *                                  ROUTE_QUALIFICATION:<grant>.
 *   DEPLOY:<anything>              the retired deploy_serialization lock (C12)
 */
export type OperatorKey =
  | { kind: 'migration_serialization'; key: string; model: string }
  | { kind: 'qa_admission'; key: string; testMachine: string }
  | { kind: 'route_qualification'; key: string; grantKey: string }
  | { kind: 'deploy_serialization'; key: string; target: string };

const PREFIXES: Record<string, OperatorKey['kind']> = {
  LIVE_DB_MIGRATION: 'migration_serialization',
  QA_HOST: 'qa_admission',
  ROUTE_QUALIFICATION: 'route_qualification',
  ROUTE_GRANT: 'route_qualification',
  DEPLOY: 'deploy_serialization',
};

const CANONICAL_PREFIX: Record<OperatorKey['kind'], string> = {
  migration_serialization: 'LIVE_DB_MIGRATION',
  qa_admission: 'QA_HOST',
  route_qualification: 'ROUTE_QUALIFICATION',
  deploy_serialization: 'DEPLOY',
};

/** Names inside keys: a machine name, a model name, a grant token. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$/;

const KEY_FORMS =
  'LIVE_DB_MIGRATION:<model>, QA_HOST:<machine>, or the bare qualification grant token (alias ROUTE_QUALIFICATION:<grant>)';

/** The operator key forms, for --help. */
export const OPERATOR_KEY_HELP =
  'operator key: LIVE_DB_MIGRATION:<model>, QA_HOST:<machine>, or a qualification grant token as given (alias ROUTE_QUALIFICATION:<grant> / ROUTE_GRANT:<grant>)';

export function parseOperatorKey(raw: string): OperatorKey {
  // C6: the third operator key is the bare grant token: no prefix, no colon
  if (!raw.includes(':') && NAME.test(raw) && !(raw.toUpperCase() in PREFIXES))
    return { kind: 'route_qualification', key: `ROUTE_QUALIFICATION:${raw}`, grantKey: raw };
  const colon = raw.indexOf(':');
  const prefix = colon > 0 ? raw.slice(0, colon).toUpperCase() : '';
  const name = colon > 0 ? raw.slice(colon + 1) : '';
  const kind = PREFIXES[prefix];
  if (!kind) {
    throw usageError('invalid_operator_key', `operator key "${raw}" has no known prefix`, {
      recovery: `use one of ${KEY_FORMS}`,
      details: { key: raw },
    });
  }
  if (!NAME.test(name)) {
    throw usageError(
      'invalid_operator_key',
      `operator key "${raw}" has an empty or malformed name after "${prefix}:"`,
      {
        recovery: `name the resource with letters, digits and . _ : / @ - (for example ${CANONICAL_PREFIX[kind]}:lab-mac-1)`,
        details: { key: raw },
      },
    );
  }
  switch (kind) {
    case 'migration_serialization':
      return { kind, key: `${CANONICAL_PREFIX[kind]}:${name}`, model: name };
    case 'qa_admission': {
      const machine = testMachineName(name); // C3: one spelling per machine
      return { kind, key: `${CANONICAL_PREFIX[kind]}:${machine}`, testMachine: machine };
    }
    case 'route_qualification':
      return { kind, key: `${CANONICAL_PREFIX[kind]}:${name}`, grantKey: name };
    case 'deploy_serialization':
      return { kind, key: `${CANONICAL_PREFIX[kind]}:${name}`, target: name };
  }
}

/** The operator key of a stored claim, or null for work kinds (items, steering, ...). */
export function operatorKeyOf(kind: TargetKind, scope: Record<string, unknown>): string | null {
  switch (kind) {
    case 'migration_serialization':
      return `LIVE_DB_MIGRATION:${String(scope.model)}`;
    case 'qa_admission':
      return `QA_HOST:${String(scope.test_machine)}`;
    case 'route_qualification':
      return `ROUTE_QUALIFICATION:${String(scope.grant_key)}`;
    case 'deploy_serialization':
      return `DEPLOY:${String(scope.target ?? scope.project_id)}`;
    default:
      return null;
  }
}
