import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import type { Kysely } from 'kysely';
import type { Executor } from '../../db/pool';
import { z } from 'zod';
import { requireAdmin } from '../../db/actors';
import type { Database } from '../../db/database';
import { recordEvent } from '../../db/events';
import {
  effectiveInThePast,
  insertPricingRevision,
  pricingRevisionById,
  pricingRevisionRows,
  sameRates,
  type PricingRevisionRow,
} from '../../db/pricingRevisions';
import { refusal, usageError } from '../../domain/errors';
import type { Cost, PricingRevision } from '../../domain/usage/pricing';
import { SHIPPED_REVISIONS } from './seedPricing';

/**
 * The pricing catalog (U12): immutable revisions with effective dates, imported from a file or
 * from the installed @pydantic/genai-prices, and the shipped ones; what every usage view prices with.
 */

/** A back-dated import re-prices the past only on purpose, with a reason. */
interface Backdating {
  backdate?: boolean;
  reason?: string;
}

export interface PricingImport extends Backdating {
  file?: string;
  genaiPrices?: boolean;
}

const RateSchema = z
  .object({
    input: z.number().nonnegative(),
    cached_input: z.number().nonnegative(),
    cache_write: z.number().nonnegative(),
    cache_write_long: z.number().nonnegative(),
    output: z.number().nonnegative(),
  })
  .partial()
  // a misspelt bucket (`outptu`) would leave that bucket unpriced in a revision that can never change
  .strict();
export const PricingFile = z
  .object({
    // blank names would be stored in a revision that can never change
    revision_id: z.string().trim().min(1, 'must not be blank'),
    effective_at: z.string().datetime({ offset: true }),
    source: z.string().trim().min(1, 'must not be blank'),
    estimated: z.boolean().default(false),
    rates: z.record(
      z.string().trim().min(1, 'a model name must not be blank'),
      RateSchema.extend({ above_200k: RateSchema.optional() }),
    ),
  })
  .strict();

/** U12: a revision effective this long before its import is back-dated (clock skew is not). */
const BACKDATE_GRACE_SECONDS = 60;

/**
 * U12: what a cost rests on beyond the catalog's current prices: what the fold noted (stored),
 * an estimated revision, a back-dated one. The price gaps of the cost itself come after, where
 * a view lists them.
 */
export function costCaveats(
  stored: string | null,
  cost: Pick<Cost, 'estimated' | 'revision_id'> | null,
  revision: PricingRevision | undefined,
  offeredAt: Date,
): string[] {
  return [
    stored,
    cost?.estimated ? `priced with estimated revision ${cost.revision_id}` : null,
    backdateCaveat(revision, offeredAt),
  ].filter((c): c is string => !!c);
}

/** U12: a cost priced by a revision imported after the session began names that revision. */
export function backdateCaveat(revision: PricingRevision | undefined, offeredAt: Date): string | null {
  if (!revision?.backdated || Date.parse(revision.backdated.imported_at) <= offeredAt.getTime()) return null;
  return `priced by back-dated revision ${revision.revision_id} (effective ${revision.effective_at}, imported ${revision.backdated.imported_at}): ${revision.backdated.reason}`;
}

/** The catalog: the imported revisions and the shipped ones (each also importable explicitly). */
export function pricingCatalog(
  rows: (Pick<PricingRevisionRow, 'revision_id' | 'estimated' | 'rates' | 'backdate_reason'> & {
    effective_at: Date | string;
    imported_at: Date | string;
  })[],
): PricingRevision[] {
  const iso = (d: Date | string) => new Date(d).toISOString();
  const stored = rows.map((r) => ({
    revision_id: r.revision_id,
    effective_at: iso(r.effective_at),
    estimated: r.estimated,
    rates: r.rates,
    backdated: r.backdate_reason ? { reason: r.backdate_reason, imported_at: iso(r.imported_at) } : null,
  }));
  return [...stored, ...SHIPPED_REVISIONS.filter((s) => !stored.some((r) => r.revision_id === s.revision_id))];
}

/** The catalog in force: the stored revisions and the shipped ones. */
export async function currentCatalog(db: Executor): Promise<PricingRevision[]> {
  return pricingCatalog(await pricingRevisionRows(db));
}

/**
 * U12: prices cannot be rewritten after the fact. A revision takes effect from now on; one
 * effective in the past would re-price sessions already priced, so it needs `backdate` with
 * a reason, is audited, and every cost it prices names it in cost_caveat.
 */
export async function importPricing(db: Kysely<Database>, input: PricingImport) {
  if (input.backdate && !input.reason?.trim()) {
    throw usageError('backdate_reason_required', '--reason: a back-dated pricing revision needs a reason', {
      recovery: 'yoke pricing import FILE --backdate --reason "why past sessions are re-priced"',
      details: { option: '--reason' },
    });
  }
  if (!input.file === !input.genaiPrices) {
    throw usageError('pricing_source_required', 'name one pricing source: a revision FILE or --genai-prices', {
      recovery: 'yoke pricing import FILE, or: yoke pricing import --genai-prices',
      details: { file: input.file ?? null, genai_prices: !!input.genaiPrices },
    });
  }
  // the catalog is an admin's (Postgres refuses anyone else's write); asked first, so no other
  // refusal sends a user to a flag they cannot use (--backdate)
  await requireAdmin(db, 'import a pricing revision');
  if (input.genaiPrices) return importGenaiPrices(db, input);
  const file = input.file!;
  let document: unknown;
  try {
    document = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw usageError('invalid_pricing_file', `cannot read pricing revision ${input.file}: ${(err as Error).message}`, {
      recovery: 'pass a JSON file with revision_id, effective_at, source and rates',
      details: { file: input.file },
    });
  }
  return storeRevision(db, document, file, input);
}

/**
 * `--genai-prices`: a new revision from the installed @pydantic/genai-prices, effective now
 * (U12: never re-pricing the past). The version the shipped revision came from is already
 * in force and is not imported again.
 */
async function importGenaiPrices(db: Kysely<Database>, input: Backdating) {
  const { installedGenaiPrices } = await import('./genaiPricesPackage');
  const { revisionFromGenaiPrices } = await import('../../domain/usage/genaiPrices');
  const { version, providers } = installedGenaiPrices();
  const shipped = SHIPPED_REVISIONS.find((r) => r.revision_id === `genai-prices-${version}`);
  if (shipped) return { revision_id: shipped.revision_id, imported: false, shipped: true };
  const { revision, notes } = revisionFromGenaiPrices(providers, version, new Date().toISOString());
  return { ...(await storeRevision(db, revision, `@pydantic/genai-prices ${version}`, input)), notes };
}

async function storeRevision(db: Kysely<Database>, document: unknown, origin: string, input: Backdating) {
  const parsed = PricingFile.safeParse(document);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw usageError('invalid_pricing_file', `${origin}: ${issue.path.join('.') || '(top level)'}: ${issue.message}`, {
      recovery: 'fix the named field and import again',
      details: { file: origin },
    });
  }
  const r = parsed.data;
  // U12: a shipped revision is in force without a row; a file reusing its id would replace it
  // in the catalog (re-pricing every session it priced), so only its own content is accepted.
  const shipped = SHIPPED_REVISIONS.find((s) => s.revision_id === r.revision_id);
  if (shipped) {
    const plain = (v: unknown) => JSON.parse(JSON.stringify(v)) as unknown;
    if (
      Date.parse(shipped.effective_at) === Date.parse(r.effective_at) &&
      isDeepStrictEqual(plain(shipped.rates), plain(r.rates))
    )
      return { revision_id: r.revision_id, imported: false, shipped: true };
    throw refusal(
      'pricing_revision_immutable',
      `pricing revision ${r.revision_id} is shipped with yoke with other rates or another effective date; revisions are immutable`,
      {
        recovery: 'import the new prices as a new revision_id with its own effective_at',
        details: { revision_id: r.revision_id, shipped: true },
      },
    );
  }
  const existing = await pricingRevisionById(db, r.revision_id);
  if (existing) {
    // a re-import is a replay only when it says what the stored revision says: its rates and
    // the instant it takes effect (another date would re-price other sessions)
    const sameDate = new Date(existing.effective_at).getTime() === Date.parse(r.effective_at);
    if (sameDate && (await sameRates(db, r.revision_id, JSON.stringify(r.rates))))
      return { revision_id: r.revision_id, imported: false };
    throw refusal(
      'pricing_revision_immutable',
      `pricing revision ${r.revision_id} already exists with ${sameDate ? 'other rates' : `another effective_at (${new Date(existing.effective_at).toISOString()})`}; revisions are immutable`,
      {
        recovery: 'import the new prices as a new revision_id with its own effective_at',
        details: { revision_id: r.revision_id },
      },
    );
  }
  return db.transaction().execute(async (trx) => {
    const { past, now } = await effectiveInThePast(trx, r.effective_at, BACKDATE_GRACE_SECONDS);
    if (past && !input.backdate) {
      throw refusal(
        'pricing_revision_backdated',
        `pricing revision ${r.revision_id} is effective ${r.effective_at}, before now (${now.toISOString()}): it would re-price sessions already priced`,
        {
          recovery: `set effective_at to now or later, or re-price the past on purpose: yoke pricing import ${origin} --backdate --reason R`,
          details: { revision_id: r.revision_id, effective_at: r.effective_at },
        },
      );
    }
    // one revision takes effect at an instant, stored or shipped
    const taken = (await currentCatalog(trx)).find((c) => Date.parse(c.effective_at) === Date.parse(r.effective_at));
    if (taken)
      throw refusal(
        'pricing_effective_at_taken',
        `pricing revision ${taken.revision_id} is already effective at ${r.effective_at}; one revision takes effect at an instant`,
        {
          recovery: `give ${r.revision_id} another effective_at (e.g. a second later) and import it again`,
          details: { revision_id: r.revision_id, effective_at: r.effective_at, taken_by: taken.revision_id },
        },
      );
    await insertPricingRevision(trx, {
      revision_id: r.revision_id,
      effective_at: r.effective_at,
      source: r.source,
      estimated: r.estimated,
      rates: JSON.stringify(r.rates),
      backdate_reason: past ? input.reason!.trim() : null,
    });
    if (past) {
      await recordEvent(trx, {
        event_type: 'PricingRevisionBackdated',
        payload: { revision_id: r.revision_id, effective_at: r.effective_at, reason: input.reason!.trim() },
      });
    }
    return { revision_id: r.revision_id, imported: true, backdated: past };
  });
}

/** The catalog in force, oldest revision first. */
export async function listPricing(db: Kysely<Database>) {
  return (await currentCatalog(db))
    .sort((a, b) => Date.parse(a.effective_at) - Date.parse(b.effective_at))
    .map((r) => ({ ...r, models: Object.keys(r.rates).length }));
}
