/**
 * I1: a create request in canonical form (lists sorted and de-duplicated, absent as empty),
 * so "the same request" is a byte-for-byte comparison and a conflict names the fields that
 * differ.
 */
export interface CreateRequest {
  project: string;
  flow: string;
  target: string;
  candidate: string;
  items: string[];
  requirement_ids: string[];
  plan_ids: string[];
}

export function canonicalRequest(r: CreateRequest): CreateRequest {
  const list = (xs: string[]) => [...new Set(xs)].sort();
  return {
    project: r.project,
    flow: r.flow,
    target: r.target,
    candidate: r.candidate.toLowerCase(),
    items: list(r.items.map((i) => i.toUpperCase())),
    requirement_ids: list(r.requirement_ids),
    plan_ids: list(r.plan_ids),
  };
}

export function differingFields(a: CreateRequest, b: CreateRequest): (keyof CreateRequest)[] {
  return (Object.keys(a) as (keyof CreateRequest)[]).filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
}

/** JSON with object keys sorted at every level: Postgres jsonb does not keep key order. */
export function stableJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)))
      : v,
  );
}
