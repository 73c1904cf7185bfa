import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { RunStatus } from '../domain/runStatuses';
import type { Executor } from './pool';

/**
 * C10: the stored membership records (deployment_run_memberships, kept by triggers on
 * deployment_run_items) and the artifacts run members upload under their authority.
 */

export interface StoredMembership {
  run_id: string;
  item_id: number;
  /** The stored member's project: the authority reads and uploads act under. */
  project_id: number;
  project: string;
  admitted_at: Date;
  ended_at: Date | null;
  ended_by: 'removed' | 'superseded' | null;
  later_run_id: string | null;
  run_status: RunStatus;
  run_terminal_at: Date | null;
  run_flow_id: number;
  /** The member row's selection while the membership lasts, else the one it ended with. */
  requirement_selection: string[] | null;
  delivery_intent: 'progress' | 'final' | null;
}

/** The record of (run, item), whether the membership lasts or ended; undefined if it never was. */
export async function storedMembership(
  db: Executor,
  runId: string,
  itemId: number,
): Promise<StoredMembership | undefined> {
  const { rows } = await sql<StoredMembership>`
    SELECT s.run_id, s.item_id, s.project_id, p.name AS project, s.admitted_at, s.ended_at, s.ended_by,
           s.later_run_id, r.status AS run_status, r.terminal_at AS run_terminal_at, r.flow_id AS run_flow_id,
           CASE WHEN s.ended_at IS NULL THEN m.requirement_selection ELSE s.requirement_selection END AS requirement_selection,
           CASE WHEN s.ended_at IS NULL THEN m.delivery_intent ELSE s.delivery_intent END AS delivery_intent
      FROM deployment_run_memberships s
      JOIN projects p ON p.project_id = s.project_id
      JOIN deployment_runs r ON r.run_id = s.run_id
      LEFT JOIN deployment_run_items m ON m.run_id = s.run_id AND m.item_id = s.item_id
     WHERE s.run_id = ${runId} AND s.item_id = ${itemId}`.execute(db);
  return rows[0];
}

export interface ArtifactRow {
  artifact_id: number;
  run_id: string;
  item: string;
  project: string;
  name: string;
  sha256: string;
  size_bytes: number;
  uploaded_by_session_id: string;
  actor_id: string;
  uploaded_at: Date;
}

function artifactColumns(db: Executor) {
  return db
    .selectFrom('deployment_run_member_artifacts as a')
    .innerJoin('backlog_items as i', 'i.item_id', 'a.item_id')
    .innerJoin('projects as ip', 'ip.project_id', 'i.project_id')
    .innerJoin('projects as p', 'p.project_id', 'a.project_id')
    .select([
      'a.artifact_id',
      'a.run_id',
      'p.name as project',
      'a.name',
      'a.sha256',
      'a.size_bytes',
      'a.uploaded_by_session_id',
      'a.actor_id',
      'a.uploaded_at',
    ])
    .select(sql<string>`ip.item_prefix || '-' || i.number`.as('item'));
}

/**
 * Stores one artifact; the same content under the same name for the same member is the one
 * artifact already stored (`replayed`), so a repeated upload stores nothing twice.
 */
export async function insertArtifact(
  db: Executor,
  a: { runId: string; itemId: number; name: string; content: Buffer; sessionId: string },
): Promise<{ artifact: ArtifactRow; replayed: boolean }> {
  const inserted = await db
    .insertInto('deployment_run_member_artifacts')
    .values({
      run_id: a.runId,
      item_id: a.itemId,
      name: a.name,
      content: a.content,
      uploaded_by_session_id: a.sessionId,
    })
    .onConflict((oc) => oc.columns(['run_id', 'item_id', 'name', 'sha256']).doNothing())
    .returning('artifact_id')
    .executeTakeFirst();
  const artifact = await artifactColumns(db)
    .where('a.run_id', '=', a.runId)
    .where('a.item_id', '=', a.itemId)
    .where('a.name', '=', a.name)
    .where('a.sha256', '=', createHash('sha256').update(a.content).digest('hex'))
    .executeTakeFirstOrThrow();
  return { artifact, replayed: !inserted };
}

export async function artifactsOfRun(db: Executor, runId: string): Promise<ArtifactRow[]> {
  return artifactColumns(db).where('a.run_id', '=', runId).orderBy('a.uploaded_at').orderBy('a.artifact_id').execute();
}
