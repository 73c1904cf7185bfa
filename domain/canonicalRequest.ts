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
    project: r.project, flow: r.flow, target: r.target, candidate: r.candidate.toLowerCase(),
    items: list(r.items.map((i) => i.toUpperCase())), requirement_ids: list(r.requirement_ids), plan_ids: list(r.plan_ids),
  };
}

export function differingFields(a: CreateRequest, b: CreateRequest): (keyof CreateRequest)[] {
  return (Object.keys(a) as (keyof CreateRequest)[]).filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
}
