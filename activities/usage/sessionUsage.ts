import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/database';
import {
  last24hSessions,
  lockUsageFolds,
  pendingFoldRequests,
  registeredWithUsage,
  settleFoldRequest,
  usageFoldedAt,
  usageOfSessions,
  writeUsage,
  type SessionUsageRow,
  type SessionUsageWrite,
} from '../../db/sessionUsage';
import { recordServedFacts, sessionById } from '../../db/sessions';
import { YokeError, usageError } from '../../domain/errors';
import { harnessMismatch, sessionNotRegistered } from '../../domain/sessionRefusals';
import { UNRECORDED_USAGE_UNDERCOUNT, totalTokens, type UsageTotals } from '../../domain/usage/buckets';
import { costOf, revisionAt, type Cost } from '../../domain/usage/pricing';
import { HIDDEN_USAGE_NOTE } from '../../domain/usage/hiddenUsage';
import { assertRegularArtifacts } from './artifactFile';
import type { Folder } from './foldPool';
import { fold, READER_VERSION, type Harness, type Reading } from './readers';
import { costCaveats, currentCatalog, importPricing, listPricing, type PricingImport } from './pricingCatalog';

export interface UsageFields {
  usage_tokens: number | null;
  usage_status: 'measured' | 'partial' | 'unavailable';
  usage_cost_usd: number | null;
  usage_cost_status: Cost['status'];
  usage_note: string;
  cost_caveat: string | null;
}

export interface FoldResult {
  session_id: string;
  harness: Harness;
  status: 'measured' | 'partial' | 'unavailable';
  totals: UsageTotals;
  /** null when the reading is unavailable (U10: no source is never a fabricated zero). */
  usage_tokens: number | null;
  reasons: string[];
  replaced: boolean;
}

/**
 * Why a reading measured nothing, per artifact (U10): a path that does not exist is a missing
 * source, named as such; an existing file simply held no usage rows.
 */
function nothingMeasured(artifacts: string[], unreadable: boolean): string[] {
  const empty = artifacts.filter((a) => existsSync(a));
  // U9: when the reading names rows it could not read, the files are not without usage rows
  const none = unreadable ? 'no readable usage rows' : 'no usage rows';
  return [...missingFiles(artifacts), ...(empty.length ? [`${none} in ${empty.join(', ')}`] : [])];
}

/** U10: the named artifacts that do not exist, as one reason (none when all do). */
function missingFiles(artifacts: string[]): string[] {
  const missing = artifacts.filter((a) => !existsSync(a));
  return missing.length ? [`artifact not found (missing file): ${missing.join(', ')}`] : [];
}

/** One machine's row of the U13 machines panel (`yoke machines usage`, the dashboard's cards). */
export interface MachineUsage {
  machine_id: string;
  /** null when no session of the machine has measured usage (U10: never a fabricated zero). */
  '24H TOKENS': number | null;
  /** null when no session of the machine has a derived cost. */
  '24H API COST': number | null;
  '24H SESSIONS': number;
  cost_status: string;
  /** `unavailable`: nothing measured (never folded, or no source); `partial`: only some sessions measured, or a partial reading. */
  usage_status: 'measured' | 'partial' | 'unavailable';
  /** How many of 24H SESSIONS have measured usage. */
  measured_sessions: number;
  /** U12: the caveats of the sessions' costs summed here (a back-dated or estimated revision), or null. */
  cost_caveat: string | null;
}

/** The session whose actor's grants bound what a usage read shows (U13); absent for an operator at the control plane. */
export interface UsageViewer {
  sessionId: string;
}

export function usageNote(status: UsageFields['usage_status'], reasons: string[]): string {
  const parts = status === 'unavailable' ? ['no usage source was found for this session', ...reasons] : reasons;
  return [...parts, UNRECORDED_USAGE_UNDERCOUNT].join('; ');
}

/**
 * What a reading makes of a session's usage: the row to write (none when a reading that
 * measured nothing meets a measured one, which it never replaces) and the fold's result.
 */
function outcome(
  input: FoldInput,
  artifacts: string[],
  stored: SessionUsageRow | undefined,
  reading: Reading,
): { row: SessionUsageWrite | undefined; result: FoldResult } {
  // U9 U10: totals carried from the checkpoint while the named source is gone are partial, and
  // say so; never the old reason alone
  const measuredReasons = reading.measured ? [...missingFiles(artifacts), ...reading.reasons] : [];
  const status: FoldResult['status'] = !reading.measured
    ? 'unavailable'
    : measuredReasons.length
      ? 'partial'
      : 'measured';
  const kept = !reading.measured && stored && stored.status !== 'unavailable' ? stored : undefined;
  const reasons = reading.measured
    ? measuredReasons
    : [...nothingMeasured(artifacts, reading.reasons.length > 0), ...reading.reasons];
  const totals: UsageTotals = kept ? kept.totals : reading.totals;
  return {
    row: kept
      ? undefined
      : {
          session_id: input.sessionId,
          harness: input.harness,
          reader_version: READER_VERSION,
          status,
          totals: JSON.stringify(reading.totals),
          reasons: JSON.stringify(reasons),
          cost_caveat: reading.cost_caveat,
          checkpoint: JSON.stringify(reading.checkpoint),
        },
    result: {
      session_id: input.sessionId,
      harness: input.harness,
      status: kept ? kept.status : status,
      totals,
      usage_tokens: (kept ? kept.status : status) === 'unavailable' ? null : totalTokens(totals),
      reasons: kept ? kept.reasons : reasons,
      replaced: !kept,
    },
  };
}

/** One fold to do: a session, its harness and its main artifact(s). */
export interface FoldInput {
  sessionId: string;
  harness: Harness;
  artifacts: string[];
}

/**
 * `folder` reads the artifacts: `fold` in this thread by default; a backfill passes its fold
 * pool's, so many sessions are read on every core.
 */
export function sessionUsageActivities(deps: { db: Kysely<Database>; folder?: Folder }) {
  const { db } = deps;
  const folder = deps.folder ?? fold;

  function resolvedArtifacts(input: FoldInput): string[] {
    if (input.artifacts.length === 0) {
      throw usageError('artifact_required', 'a fold needs at least one --artifact', {
        recovery: 'pass the transcript or rollout path with --artifact PATH',
      });
    }
    const artifacts = input.artifacts.map((a) => resolve(a));
    assertRegularArtifacts(artifacts);
    return artifacts;
  }

  /** Reads on from the stored checkpoint (a reading of another harness starts afresh). */
  const read = (input: FoldInput, artifacts: string[], stored: SessionUsageRow | undefined) =>
    folder(input.harness, stored?.harness === input.harness ? stored.checkpoint : undefined, artifacts);

  /** The stored usage a fold starts from, once the session is known and registered for this harness. */
  function registeredFor(
    input: FoldInput,
    registered: { harness: string; usage: SessionUsageRow | undefined } | undefined,
  ): SessionUsageRow | undefined {
    if (!registered) throw sessionNotRegistered(input.sessionId, input.harness);
    if (registered.harness !== 'other' && registered.harness !== input.harness)
      throw harnessMismatch(input.sessionId, registered.harness, input.harness);
    return registered.usage;
  }

  /**
   * Folds a session's artifact (U9, U10). The artifact is read with no transaction open and no
   * lock held (a slow or endless read must never pin a Postgres connection); the checkpoint and
   * the totals it produced are then written in one short transaction under the session's
   * advisory lock, and only if no other fold landed since this one read its checkpoint (else it
   * reads again from the newer one), so folds of one session still count every byte once.
   * Absolute totals replace the stored ones, except that a reading that measured nothing never
   * replaces a measured one.
   */
  async function foldSessionUsage(input: FoldInput): Promise<FoldResult> {
    const artifacts = resolvedArtifacts(input);
    const registered = (await registeredWithUsage(db, [input.sessionId])).get(input.sessionId);
    let stored = registeredFor(input, registered);
    for (;;) {
      const reading = await read(input, artifacts, stored);
      const written = await db.transaction().execute(async (trx) => {
        const [landed] = await writeReadings(trx, [{ input, artifacts, stored, reading }]);
        return landed
          ? { result: landed }
          : { raced: (await registeredWithUsage(trx, [input.sessionId])).get(input.sessionId)?.usage };
      });
      if (written.result) return written.result;
      stored = written.raced; // another fold landed while this one read: fold on from its checkpoint
    }
  }

  /**
   * The fold workflow's activity (issues 5 and 13, U10): folds, oldest first, the requests the
   * session's owner recorded in Postgres (`hooks usage --async`, under its own role), never a
   * path from a signal or a workflow input. Each request is settled with its outcome; a refused
   * one (an artifact that is not a regular file) with its refusal, so the requests after it are
   * still folded. A transient failure leaves the rest pending for the activity's retry.
   */
  async function foldRequestedUsage(input: { sessionId: string }): Promise<{ folded: number; refused: number }> {
    let folded = 0;
    let refused = 0;
    for (const request of await pendingFoldRequests(db, input.sessionId)) {
      try {
        const r = await foldSessionUsage({
          sessionId: input.sessionId,
          harness: request.harness,
          artifacts: request.artifacts,
        });
        await settleFoldRequest(db, request.request_id, {
          status: r.status,
          usage_tokens: r.usage_tokens,
          reasons: r.reasons,
        });
        folded++;
      } catch (err) {
        if (!(err instanceof YokeError) || err.kind === 'unreachable') throw err;
        await settleFoldRequest(db, request.request_id, { refused: err.code, message: err.message });
        refused++;
      }
    }
    return { folded, refused };
  }

  /**
   * Many sessions' folds, as a backfill runs them: their stored rows read in one statement,
   * their artifacts read on the folder's threads, and their readings written in one short
   * transaction (one lock statement, one check, one upsert). A session another fold wrote
   * meanwhile is folded again on its own (foldSessionUsage); a failure is that session's alone.
   */
  async function foldSessionsUsage(inputs: FoldInput[]): Promise<(FoldResult | Error)[]> {
    const registered = await registeredWithUsage(
      db,
      inputs.map((i) => i.sessionId),
    );
    const folded = await Promise.all(
      inputs.map(async (input) => {
        try {
          const artifacts = resolvedArtifacts(input);
          const stored = registeredFor(input, registered.get(input.sessionId));
          return { input, artifacts, stored, reading: await read(input, artifacts, stored) };
        } catch (err) {
          return err as Error;
        }
      }),
    );
    const readings = folded.filter((f): f is Exclude<typeof f, Error> => !(f instanceof Error));
    // A write one session's reading makes Postgres refuse (bytes jsonb rejects, say) would fail
    // the whole batch: then each session is folded and written on its own below, so a failure
    // stays that session's alone.
    const landed = await db
      .transaction()
      .execute((trx) => writeReadings(trx, readings))
      .catch(() => readings.map(() => undefined));
    const results = new Map(readings.map((r, i) => [r.input.sessionId, landed[i]]));
    return Promise.all(
      folded.map(async (f, i) => {
        if (f instanceof Error) return f;
        try {
          return results.get(f.input.sessionId) ?? (await foldSessionUsage(inputs[i]!));
        } catch (err) {
          return err as Error;
        }
      }),
    );
  }

  /**
   * Under the sessions' fold locks, writes each reading whose session no other fold wrote since
   * its checkpoint was read; undefined for the others (they read again).
   */
  async function writeReadings(
    trx: Kysely<Database>,
    readings: { input: FoldInput; artifacts: string[]; stored: SessionUsageRow | undefined; reading: Reading }[],
  ): Promise<(FoldResult | undefined)[]> {
    if (readings.length === 0) return [];
    const ids = readings.map((r) => r.input.sessionId);
    await lockUsageFolds(trx, ids);
    const foldedAt = await usageFoldedAt(trx, ids);
    const rows: SessionUsageWrite[] = [];
    const results = readings.map(({ input, artifacts, stored, reading }) => {
      if (foldedAt.get(input.sessionId)?.getTime() !== stored?.folded_at.getTime()) return undefined;
      const { row, result } = outcome(input, artifacts, stored, reading);
      if (row) rows.push(row);
      return { result, served: input.harness === 'codex' ? reading.checkpoint.served : undefined };
    });
    await writeUsage(trx, rows);
    for (const [i, r] of results.entries()) {
      // U3: a rollout's served model and window (turn_context, or a window stated before any
      // model); facts are never unlearned: what a statement leaves out keeps the attested value
      if (r?.served?.model || r?.served?.window)
        await recordServedFacts(trx, ids[i]!, {
          model: r.served.model ?? undefined,
          window: r.served.window ?? undefined,
          effort: r.served.effort ?? undefined,
        });
    }
    return results.map((r) => r?.result);
  }

  /** U12: the derived roster fields; cost from the revision effective at the session's offered_at. */
  async function usageFields(sessionIds: string[]): Promise<Map<string, UsageFields>> {
    const out = new Map<string, UsageFields>();
    if (sessionIds.length === 0) return out;
    const [rows, catalog] = await Promise.all([usageOfSessions(db, sessionIds), currentCatalog(db)]);
    const withNote = (note: string): UsageFields => ({
      usage_tokens: null,
      usage_status: 'unavailable',
      usage_cost_usd: null,
      usage_cost_status: 'unavailable',
      usage_note: note,
      cost_caveat: null,
    });
    const unavailable = (why: string) => withNote(usageNote('unavailable', [why]));
    for (const r of rows) {
      if (!r.visible) {
        // U13: hidden, not missing: the note must not say no source was found
        out.set(r.session_id, withNote(HIDDEN_USAGE_NOTE));
        continue;
      }
      if (!r.status) {
        out.set(r.session_id, unavailable('nothing has been folded for this session'));
        continue;
      }
      const totals = r.totals!;
      const revision = revisionAt(catalog, r.offered_at.toISOString());
      const cost = costOf(totals, revision);
      const caveats = [...costCaveats(r.cost_caveat, cost, revision, r.offered_at), ...cost.gaps];
      out.set(r.session_id, {
        usage_tokens: r.status === 'unavailable' ? null : totalTokens(totals),
        usage_status: r.status,
        usage_cost_usd: r.status === 'unavailable' ? null : cost.usd,
        usage_cost_status: r.status === 'unavailable' ? 'unavailable' : cost.status,
        usage_note: usageNote(r.status, r.reasons ?? []),
        cost_caveat: caveats.length ? caveats.join('; ') : null,
      });
    }
    return out;
  }

  /**
   * U13: the 24-hour cohort: sessions ended (ended_at, else terminated_at) in the trailing
   * 24 h, plus sessions offered inside it and still open; probes and rows without a machine
   * are left out. Each session counts once.
   */
  async function viewerActor(viewer: UsageViewer): Promise<string> {
    const session = await sessionById(db, viewer.sessionId);
    if (!session) {
      throw sessionNotRegistered(viewer.sessionId);
    }
    return session.actor_id;
  }

  async function last24hCohort(viewer?: UsageViewer): Promise<{ session_id: string; machine_id: string }[]> {
    // U13: a session sees usage only for what its actor may read.
    return last24hSessions(db, viewer ? await viewerActor(viewer) : undefined);
  }

  /**
   * U13 machines panel, per machine: the 24-hour sums of what was measured. U10: a machine none
   * of whose sessions has measured usage (never folded, or no source) has no sum: its tokens and
   * cost are null and usage_status is `unavailable`, never a fabricated zero; a machine where only
   * some sessions were measured sums those and says `partial`, with measured_sessions of
   * 24H SESSIONS counted. A real zero (sessions measured that used nothing) stays 0, `measured`.
   */
  async function machinesUsage(viewer?: UsageViewer): Promise<MachineUsage[]> {
    const cohort = await last24hCohort(viewer);
    const fields = await usageFields(cohort.map((c) => c.session_id));
    const machines = new Map<
      string,
      {
        tokens: number;
        cost: number;
        priced: number;
        sessions: number;
        measured: number;
        partial: boolean;
        cost_status: Set<string>;
        caveats: Set<string>;
      }
    >();
    for (const c of cohort) {
      const m = machines.get(c.machine_id) ?? {
        tokens: 0,
        cost: 0,
        priced: 0,
        sessions: 0,
        measured: 0,
        partial: false,
        cost_status: new Set<string>(),
        caveats: new Set<string>(),
      };
      const f = fields.get(c.session_id)!;
      m.sessions += 1;
      if (f.usage_status !== 'unavailable') {
        m.measured += 1;
        m.tokens += f.usage_tokens ?? 0;
      }
      if (f.usage_status === 'partial') m.partial = true;
      if (f.usage_cost_usd !== null) {
        m.priced += 1;
        m.cost += f.usage_cost_usd;
      }
      m.cost_status.add(f.usage_cost_status);
      if (f.cost_caveat) m.caveats.add(f.cost_caveat);
      machines.set(c.machine_id, m);
    }
    return [...machines.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([machine_id, m]) => ({
        machine_id,
        '24H TOKENS': m.measured ? m.tokens : null,
        '24H API COST': m.priced ? Math.round(m.cost * 1e6) / 1e6 : null,
        '24H SESSIONS': m.sessions,
        cost_status: m.cost_status.size === 1 ? [...m.cost_status][0]! : 'partial',
        usage_status: !m.measured ? 'unavailable' : m.partial || m.measured < m.sessions ? 'partial' : 'measured',
        measured_sessions: m.measured,
        // U12: a partial cost says why; sessions never measured have no cost to sum
        cost_caveat:
          [
            ...m.caveats,
            ...(m.priced > 0 && m.sessions > m.priced
              ? [
                  `${m.sessions - m.priced} of ${m.sessions} sessions have no cost (${m.sessions - m.measured} not measured)`,
                ]
              : []),
          ].join('; ') || null,
      }));
  }

  return {
    foldSessionUsage,
    foldRequestedUsage,
    foldSessionsUsage,
    usageFields,
    importPricing: (input: PricingImport) => importPricing(db, input),
    listPricing: () => listPricing(db),
    last24hCohort,
    machinesUsage,
  };
}

export type SessionUsageActivities = ReturnType<typeof sessionUsageActivities>;
