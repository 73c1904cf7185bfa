import { usageError } from './errors';

/** A backlog item is named PREFIX-N, where PREFIX is its project's item prefix. */
export interface ItemRef {
  prefix: string;
  number: number;
}

const ITEM_REF = /^([A-Za-z][A-Za-z0-9]{0,15})-([1-9][0-9]{0,8})$/;

export function parseItemRef(raw: string): ItemRef {
  const m = ITEM_REF.exec(raw.trim());
  if (!m) {
    throw usageError('invalid_item_ref', `"${raw}" is not a backlog item reference`, {
      recovery: 'name the item as PREFIX-N, for example YOKE-12',
      details: { item: raw },
    });
  }
  return { prefix: m[1]!.toUpperCase(), number: Number(m[2]) };
}

export function formatItemRef(ref: ItemRef): string {
  return `${ref.prefix}-${ref.number}`;
}

/** The default item prefix of a project: its name, upper-cased, letters and digits only. */
export function defaultItemPrefix(projectName: string): string {
  const prefix = projectName
    .toUpperCase()
    .replace(/[^A-Z0-9]/g, '')
    .replace(/^[0-9]+/, '');
  return prefix.slice(0, 16) || 'ITEM';
}
