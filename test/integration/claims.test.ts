import { sql } from 'kysely';
import { Client } from 'pg';
import { claimPrimitiveActivities } from '../../activities/claimPrimitives';
import { createTestDatabase, type TestDatabase } from '../helpers/db';
import { addTestMachines, ageSession, refusalOf, seedLab, services, type Services } from '../helpers/fixtures';
import { untilTrue } from '../helpers/until';

let t: TestDatabase;
let s: Services;

beforeEach(async () => {
  t = await createTestDatabase();
  s = services(t.db);
  await seedLab(s);
});
afterEach(async () => {
  await t.drop();
});

const liveRow = (claimId: number) =>
  t.db.selectFrom('work_claims').selectAll().where('claim_id', '=', claimId).executeTakeFirstOrThrow();

describe('coordination claims', () => {
  test('C1 every claim kind lives in the one work_claims table and one session heartbeat carries them all', async () => {
    const item = await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    const grant = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'ROUTE_QUALIFICATION:beta-route',
      project: 'web',
    });
    const rows = await t.db
      .selectFrom('work_claims')
      .select(['claim_id', 'target_kind'])
      .where('session_id', '=', 'w1')
      .orderBy('claim_id')
      .execute();
    expect(rows.map((r) => r.target_kind)).toEqual([
      'item',
      'qa_admission',
      'migration_serialization',
      'route_qualification',
    ]);
    expect(rows.map((r) => r.claim_id)).toEqual([
      item.claim.claim_id,
      qa.claim.claim_id,
      mig.claim.claim_id,
      grant.claim.claim_id,
    ]);

    await t.db
      .updateTable('work_claims')
      .set({ heartbeat_at: sql`now() - interval '1 hour'` })
      .execute();
    await s.heartbeatSession({ sessionId: 'w1' });
    const fresh = await t.db
      .selectFrom('work_claims')
      .select(sql<boolean>`heartbeat_at > now() - interval '1 minute'`.as('fresh'))
      .where('session_id', '=', 'w1')
      .execute();
    expect(fresh.every((r) => r.fresh)).toBe(true);
  });

  test('C1 C4 a take refused before it could hold anything records no item (ended session, item of another project, a migration held for another item)', async () => {
    const primitives = claimPrimitiveActivities({ db: t.db });
    await s.endSession({ sessionId: 'w2' });
    const items = () => t.db.selectFrom('backlog_items').select('number').execute();
    const before = await items();
    expect((await refusalOf(s.takeItem({ sessionId: 'w2', item: 'WEB-555' }))).code).toBe('session_ended');
    expect((await refusalOf(primitives.takeEpicTask({ sessionId: 'w2', item: 'WEB-556', task: 'T001' }))).code).toBe(
      'session_ended',
    );
    expect((await refusalOf(s.takeItem({ sessionId: 'nobody', item: 'WEB-557' }))).code).toBe('session_not_registered');
    const outside = await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w1', key: 'LIVE_DB_MIGRATION:orders', project: 'web', item: 'API-558' }),
    );
    expect(outside.code).toBe('item_outside_project');
    // the migration's unit (project, model) is held for WEB-1: another item is refused, not recorded
    await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    const typo = await refusalOf(
      s.acquireCoordinationClaim({
        sessionId: 'w1',
        key: 'LIVE_DB_MIGRATION:orders',
        project: 'web',
        item: 'WEB-9999',
      }),
    );
    expect(typo.code).toBe('claim_held');
    expect((await items()).map((r) => r.number).sort()).toEqual([...before.map((r) => r.number), 1].sort());
    // a live session's take records the item it names, as before
    await s.takeItem({ sessionId: 'w1', item: 'WEB-559' });
    expect((await items()).map((r) => r.number)).toContain(559);
  });

  test('C2 the three coordination kinds record their scopes', async () => {
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-7',
    });
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:mac-mini-lab' });
    const grant = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'ROUTE_QUALIFICATION:beta-route',
      project: 'web',
    });
    const web = await t.db.selectFrom('projects').selectAll().where('name', '=', 'web').executeTakeFirstOrThrow();
    expect(mig.claim.target_kind).toBe('migration_serialization');
    expect(mig.claim.scope).toEqual({ project_id: web.project_id, model: 'orders', item_id: mig.claim.item_id });
    expect(mig.claim.item).toBe('WEB-7');
    expect(qa.claim.target_kind).toBe('qa_admission');
    expect(qa.claim.scope).toEqual({ test_machine: 'mac-mini-lab' });
    expect(grant.claim.target_kind).toBe('route_qualification');
    expect(grant.claim.scope).toEqual({ project_id: web.project_id, grant_key: 'beta-route' });
  });

  test('C3 the database refuses a second live holder even when the application is bypassed', async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const duplicate = t.db
      .insertInto('work_claims')
      .values({
        target_kind: 'qa_admission',
        scope: JSON.stringify({ test_machine: 'lab-1' }),
        key: 'QA_HOST:lab-1',
        session_id: 'w2',
      })
      .execute();
    await expect(duplicate).rejects.toMatchObject({ code: '23505', constraint: 'work_claims_live_qa_admission' });
    expect((await liveRow(qa.claim.claim_id)).released_at).toBeNull();
  });

  test('C3 exclusivity units: migration on (project, model), QA host on the machine alone, grants on (project, grant)', async () => {
    await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    // another item of the same project and model is refused; the same model in another project is free
    const migRefusal = await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w2', key: 'LIVE_DB_MIGRATION:orders', project: 'web', item: 'WEB-2' }),
    );
    expect(migRefusal.code).toBe('claim_held');
    await expect(
      s.acquireCoordinationClaim({ sessionId: 'a1', key: 'LIVE_DB_MIGRATION:orders', project: 'api', item: 'API-1' }),
    ).resolves.toMatchObject({ reentered: false });
    await expect(
      s.acquireCoordinationClaim({ sessionId: 'w2', key: 'LIVE_DB_MIGRATION:users', project: 'web', item: 'WEB-2' }),
    ).resolves.toMatchObject({ reentered: false });

    // a QA host is one machine whichever project drives it
    await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1', project: 'web' });
    const qaRefusal = await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'a1', key: 'QA_HOST:lab-1', project: 'api' }),
    );
    expect(qaRefusal.code).toBe('claim_held');

    await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'ROUTE_QUALIFICATION:beta', project: 'web' });
    expect(
      (
        await refusalOf(
          s.acquireCoordinationClaim({ sessionId: 'w2', key: 'ROUTE_QUALIFICATION:beta', project: 'web' }),
        )
      ).code,
    ).toBe('claim_held');
    await expect(
      s.acquireCoordinationClaim({ sessionId: 'a1', key: 'ROUTE_QUALIFICATION:beta', project: 'api' }),
    ).resolves.toMatchObject({ reentered: false });
  });

  test('C3 a refused acquire names the holder claim id, session and since when, and the recovery', async () => {
    const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const refusal = await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1' }));
    expect(refusal.code).toBe('claim_held');
    expect(refusal.message).toContain(`claim ${held.claim.claim_id}`);
    expect(refusal.message).toContain('session w1');
    expect(refusal.message).toContain(held.claim.claimed_at);
    expect(refusal.recovery).toContain(`--claim-id ${held.claim.claim_id} --holder-session-id w1`);
    expect(refusal.details).toMatchObject({
      key: 'QA_HOST:lab-1',
      holder: { claim_id: held.claim.claim_id, session_id: 'w1' },
    });
  });

  test('C4 the owning item re-enters and heartbeats its migration hold; another item is refused', async () => {
    const first = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    await t.db
      .updateTable('work_claims')
      .set({ heartbeat_at: sql`now() - interval '1 hour'` })
      .where('claim_id', '=', first.claim.claim_id)
      .execute();
    // the same item, from another lane of the same item, re-enters the same hold
    const again = await s.acquireCoordinationClaim({
      sessionId: 'w2',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    expect(again.reentered).toBe(true);
    expect(again.claim.claim_id).toBe(first.claim.claim_id);
    expect(new Date(again.claim.heartbeat_at).getTime()).toBeGreaterThan(Date.now() - 60_000);
    const other = await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w1', key: 'LIVE_DB_MIGRATION:orders', project: 'web', item: 'WEB-2' }),
    );
    expect(other.code).toBe('claim_held');
    expect(other.message).toContain('for item WEB-1');
  });

  test('C5 the stale-session sweep skips sticky kinds and reclaims liveness-bound ones', async () => {
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const grant = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'ROUTE_QUALIFICATION:beta',
      project: 'web',
    });
    const item = await s.takeItem({ sessionId: 'w1', item: 'WEB-2' });
    await ageSession(t.db, 'w1', 3600);
    const result = await s.sweepStaleSessions({ staleAfterMs: 60_000 });
    expect(result.terminated_sessions).toEqual(['w1']);
    expect(result.released_claim_ids).toEqual([grant.claim.claim_id, item.claim.claim_id].sort((a, b) => a - b));
    expect((await liveRow(mig.claim.claim_id)).released_at).toBeNull();
    expect((await liveRow(qa.claim.claim_id)).released_at).toBeNull();
    expect((await liveRow(grant.claim.claim_id)).release_reason).toBe('stale_session_sweep');
    // a second sweep finds nothing more: sticky holds wait for the operator
    expect(await s.sweepStaleSessions({ staleAfterMs: 60_000 })).toEqual({
      terminated_sessions: [],
      released_claim_ids: [],
      expired_reservation_claim_ids: [],
    });
  });

  test('C5 session end releases non-sticky claims and keeps sticky ones', async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const grant = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'ROUTE_QUALIFICATION:beta',
      project: 'web',
    });
    const ended = await s.endSession({ sessionId: 'w1' });
    expect(ended.ended).toBe(true);
    expect(ended.released_claims.map((c) => c.claim_id)).toEqual([grant.claim.claim_id]);
    expect(ended.retained_sticky_claims.map((c) => c.claim_id)).toEqual([qa.claim.claim_id]);
    expect((await liveRow(qa.claim.claim_id)).released_at).toBeNull();
    expect((await liveRow(grant.claim.claim_id)).release_reason).toBe('session_end');
  });

  test('C5 the claim-free end check does not count sticky holds', async () => {
    await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    await s.takeItem({ sessionId: 'w2', item: 'WEB-3' });
    await s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-2' });
    const stickyOnly = await s.endSession({ sessionId: 'w1', ifClaimFree: true });
    expect(stickyOnly.ended).toBe(true);
    const holdsItem = await s.endSession({ sessionId: 'w2', ifClaimFree: true });
    expect(holdsItem.ended).toBe(false);
    expect(holdsItem.blocking_claims.map((c) => c.item)).toEqual(['WEB-3']);
    expect(holdsItem.session.ended_at).toBeNull();
  });

  test('C6 each coordination claim is addressed by its operator key', async () => {
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:primary',
      project: 'web',
      item: 'WEB-1',
    });
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'qa_host:lab-1' });
    const grant = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'ROUTE_GRANT:tok-123', project: 'web' });
    expect([mig.claim.key, qa.claim.key, grant.claim.key]).toEqual([
      'LIVE_DB_MIGRATION:primary',
      'QA_HOST:lab-1',
      'ROUTE_QUALIFICATION:tok-123',
    ]);
    const listed = await s.listCoordinationClaims({ key: 'QA_HOST:lab-1', activeOnly: true });
    expect(listed.map((c) => c.claim_id)).toEqual([qa.claim.claim_id]);
    const bad = await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w1', key: 'PRINTER:lab' }));
    expect(bad.code).toBe('invalid_operator_key');
    expect(bad.kind).toBe('usage');
  });

  test('C7 listing a QA_HOST key ignores any project filter', async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1', project: 'web' });
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    const viaOtherProject = await s.listCoordinationClaims({ key: 'QA_HOST:lab-1', project: 'api', activeOnly: true });
    expect(viaOtherProject.map((c) => c.claim_id)).toEqual([qa.claim.claim_id]);
    // other key kinds do honour the project filter
    expect(
      await s.listCoordinationClaims({ key: 'LIVE_DB_MIGRATION:orders', project: 'api', activeOnly: true }),
    ).toEqual([]);
    expect(
      (await s.listCoordinationClaims({ key: 'LIVE_DB_MIGRATION:orders', project: 'web' })).map((c) => c.claim_id),
    ).toEqual([mig.claim.claim_id]);
  });

  test('C8 a QA host is recovered only from a steering seat on the holder project with claims.release', async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const release = (actingSessionId: string) =>
      s.operatorRelease({
        actingSessionId,
        key: 'QA_HOST:lab-1',
        claimId: qa.claim.claim_id,
        holderSessionId: 'w1',
        reason: 'suite hung',
        project: 'api',
      });

    // a session without a seat on web (the holder's project) is refused
    expect((await refusalOf(release('w2'))).code).toBe('steering_seat_required');
    // a seat without the permission is refused
    await s.registerSession({ sessionId: 'op2', actorId: 'dave', project: 'api' });
    await s.releaseSteeringSeat({ sessionId: 'op', project: 'web' });
    await s.takeSteeringSeat({ sessionId: 'op2', project: 'web' });
    const denied = await refusalOf(release('op2'));
    expect(denied.code).toBe('permission_denied');
    expect(denied.recovery).toContain('yoke projects grant web --actor dave --permission claims.release');
    // with both, it is released; the --project given is ignored for QA_HOST keys
    await s.grantPermission({ project: 'web', actor: 'dave', permission: 'claims.release' });
    const done = await release('op2');
    expect(done.claim.released_at).not.toBeNull();
    expect(done.claim.released_by_session_id).toBe('op2');
  });

  test('C8 other key kinds require --project for the operator release, and the holder must match', async () => {
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    const noProject = await refusalOf(
      s.operatorRelease({
        actingSessionId: 'op',
        key: 'LIVE_DB_MIGRATION:orders',
        claimId: mig.claim.claim_id,
        holderSessionId: 'w1',
        reason: 'r',
      }),
    );
    expect(noProject).toMatchObject({ code: 'project_required', kind: 'usage' });
    const wrongHolder = await refusalOf(
      s.operatorRelease({
        actingSessionId: 'op',
        key: 'LIVE_DB_MIGRATION:orders',
        claimId: mig.claim.claim_id,
        holderSessionId: 'w2',
        reason: 'r',
        project: 'web',
      }),
    );
    expect(wrongHolder.code).toBe('holder_session_mismatch');
    const wrongProject = await refusalOf(
      s.operatorRelease({
        actingSessionId: 'op',
        key: 'LIVE_DB_MIGRATION:orders',
        claimId: mig.claim.claim_id,
        holderSessionId: 'w1',
        reason: 'r',
        project: 'api',
      }),
    );
    expect(wrongProject.code).toBe('claim_project_mismatch');
    // C8: the refusal names the claim's own project, and the recovery passes it
    expect(wrongProject.message).toBe(`claim ${mig.claim.claim_id} belongs to project web, not api`);
    expect(wrongProject.recovery).toBe("name the holder's project: --project web");
    expect((await liveRow(mig.claim.claim_id)).released_at).toBeNull();
  });

  test('C3 machine names are case-insensitive: QA_HOST:LAB-1 and QA_HOST:lab-1 are one hold; an unregistered machine is refused test_machine_unknown naming test-machine add', async () => {
    const held = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:LAB-1' });
    expect(held.claim).toMatchObject({ key: 'QA_HOST:lab-1' });
    const other = await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1' }));
    expect(other.code).toBe('claim_held');
    expect(other.details).toMatchObject({ holder: expect.objectContaining({ claim_id: held.claim.claim_id }) });
    const live = await t.db
      .selectFrom('work_claims')
      .select('claim_id')
      .where('target_kind', '=', 'qa_admission')
      .where('released_at', 'is', null)
      .execute();
    expect(live).toHaveLength(1);
    const unknown = await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:nonexistent' }));
    expect(unknown.code).toBe('test_machine_unknown');
    expect(unknown.recovery).toContain('yoke test-machine add nonexistent');
    expect(
      await t.db.selectFrom('work_claims').select('claim_id').where('key', '=', 'QA_HOST:nonexistent').execute(),
    ).toEqual([]);
    // a machine added under another case is the same machine
    await addTestMachines(s, ['LAB3']);
    expect((await s.listTestMachines({ name: 'lab3' })).map((m) => m.name)).toEqual(['lab3']);
    await expect(s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:Lab3' })).resolves.toMatchObject({
      claim: { key: 'QA_HOST:lab3' },
    });
  });

  test('C9 a QA host holder releases by claim id; a stranger without authority cannot', async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    const stranger = await refusalOf(
      s.releaseWorkClaim({ actingSessionId: 'a1', claimId: qa.claim.claim_id, reason: 'mine now' }),
    );
    expect(stranger.code).toBe('steering_seat_required');
    const released = await s.releaseWorkClaim({
      actingSessionId: 'w1',
      claimId: qa.claim.claim_id,
      reason: 'run complete',
    });
    expect(released).toMatchObject({
      operator_event_id: null,
      claim: { release_reason: 'run complete', released_by_session_id: 'w1' },
    });
    // a retry of the same release answers the same; the host is free for the next taker
    await expect(
      s.releaseWorkClaim({ actingSessionId: 'w1', claimId: qa.claim.claim_id, reason: 'run complete' }),
    ).resolves.toMatchObject({ claim: { claim_id: qa.claim.claim_id } });
    await expect(s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-1' })).resolves.toMatchObject({
      reentered: false,
    });
  });

  test("C9 a QA host holder whose session ended: the ended session is refused naming its actor, and the holder's actor releases it from any live session", async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    await s.endSession({ sessionId: 'w1' }); // the suite outlives the session: the sticky hold stays
    expect((await liveRow(qa.claim.claim_id)).released_at).toBeNull();
    const ended = await refusalOf(
      s.releaseWorkClaim({ actingSessionId: 'w1', claimId: qa.claim.claim_id, reason: 'suite finished' }),
    );
    expect(ended.code).toBe('session_ended');
    expect(ended.message).toContain('alice');
    expect(ended.recovery).toContain(`yoke claims work release --claim-id ${qa.claim.claim_id}`);
    // another actor's session still goes through the operator rules
    const stranger = await refusalOf(
      s.releaseWorkClaim({ actingSessionId: 'w2', claimId: qa.claim.claim_id, reason: 'mine now' }),
    );
    expect(stranger.code).toBe('steering_seat_required');
    await s.registerSession({ sessionId: 'w1-next', actorId: 'alice', project: 'web' });
    const released = await s.releaseWorkClaim({
      actingSessionId: 'w1-next',
      claimId: qa.claim.claim_id,
      reason: 'suite finished',
    });
    expect(released).toMatchObject({
      operator_event_id: null,
      claim: { release_reason: 'suite finished', released_by_session_id: 'w1-next' },
    });
    expect((await liveRow(qa.claim.claim_id)).released_at).not.toBeNull();
  });

  test("C8 operator release follows the hold's stored project, not the project its holder's session moved to", async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    // the holder's session leaves web for api (an admin moves it: registering again keeps a
    // session's project, session_identity_conflict); the claim stays under web's authority
    await s.registerSession({ sessionId: 'opa', actorId: 'ops', project: 'api' });
    await t.db
      .updateTable('sessions')
      .set({ project_id: (eb) => eb.selectFrom('projects').select('project_id').where('name', '=', 'api') })
      .where('session_id', '=', 'w1')
      .execute();
    await s.takeSteeringSeat({ sessionId: 'opa', project: 'api' });
    await s.grantPermission({ project: 'api', actor: 'ops', permission: 'claims.release' });
    const viaApi = await refusalOf(
      s.operatorRelease({
        actingSessionId: 'opa',
        key: 'QA_HOST:lab-1',
        claimId: qa.claim.claim_id,
        holderSessionId: 'w1',
        reason: 'r',
      }),
    );
    expect(viaApi.code).toBe('steering_seat_required');
    expect(viaApi.message).toContain('web');
    await expect(
      s.operatorRelease({
        actingSessionId: 'op',
        key: 'QA_HOST:lab-1',
        claimId: qa.claim.claim_id,
        holderSessionId: 'w1',
        reason: 'r',
      }),
    ).resolves.toMatchObject({ claim: { project: 'web' } });
  });

  test('C11 a stranded migration lease: event before release, reason kept for good, refused from a hook', async () => {
    const mig = await s.acquireCoordinationClaim({
      sessionId: 'w1',
      key: 'LIVE_DB_MIGRATION:orders',
      project: 'web',
      item: 'WEB-1',
    });
    const input = {
      actingSessionId: 'op',
      key: 'LIVE_DB_MIGRATION:orders',
      claimId: mig.claim.claim_id,
      holderSessionId: 'w1',
      reason: 'author left; migration verified complete',
      project: 'web',
    };

    const fromHook = await refusalOf(s.operatorRelease({ ...input, hookContext: true }));
    expect(fromHook.code).toBe('hook_context_refused');
    expect((await liveRow(mig.claim.claim_id)).released_at).toBeNull();
    expect(await t.db.selectFrom('events').selectAll().execute()).toEqual([]);

    const done = await s.operatorRelease(input);
    const [event] = await t.db
      .selectFrom('events')
      .selectAll()
      .where('event_type', '=', 'WARNOperatorLeaseRelease')
      .execute();
    const row = await liveRow(mig.claim.claim_id);
    expect(event).toMatchObject({
      claim_id: mig.claim.claim_id,
      session_id: 'op',
      payload: { holder_session_id: 'w1', reason: input.reason, sticky: true },
    });
    expect(done.operator_event_id).toBe(event!.event_id);
    expect(event!.created_at.getTime()).toBeLessThanOrEqual(row.released_at!.getTime());
    expect(row).toMatchObject({
      release_reason: input.reason,
      released_by_session_id: 'op',
      released_by_actor_id: 'ops',
    });

    // the reason is permanent: a second operator release is refused and changes nothing
    const again = await refusalOf(s.operatorRelease({ ...input, reason: 'another reason' }));
    expect(again.code).toBe('claim_already_released');
    expect((await liveRow(mig.claim.claim_id)).release_reason).toBe(input.reason);
  });

  test('C12 DEPLOY: keys are retired; a pre-retirement hold is released by claim id and freed by the sweep', async () => {
    const take = await refusalOf(s.acquireCoordinationClaim({ sessionId: 'w1', key: 'DEPLOY:web' }));
    expect(take.code).toBe('deploy_lock_retired');
    // holds taken before the retirement are still rows in work_claims
    const legacy = async (sessionId: string, target: string) =>
      (
        await t.db
          .insertInto('work_claims')
          .values({
            target_kind: 'deploy_serialization',
            scope: JSON.stringify({ project_id: 1, target }),
            key: `DEPLOY:${target}`,
            project_id: 1,
            session_id: sessionId,
          })
          .returning('claim_id')
          .executeTakeFirstOrThrow()
      ).claim_id;
    const heldByW1 = await legacy('w1', 'web');
    const heldByW2 = await legacy('w2', 'web-preview');

    const byKey = await refusalOf(
      s.operatorRelease({
        actingSessionId: 'op',
        key: 'DEPLOY:web',
        claimId: heldByW1,
        holderSessionId: 'w1',
        reason: 'r',
        project: 'web',
      }),
    );
    expect(byKey.code).toBe('deploy_lock_retired');
    await s.releaseWorkClaim({ actingSessionId: 'w1', claimId: heldByW1, reason: 'retired lock' });

    // not sticky: the sweep frees one whose holder ended
    await s.endSession({ sessionId: 'w2', reason: 'crashed' });
    await t.db
      .updateTable('work_claims')
      .set({ released_at: null, release_reason: null })
      .where('claim_id', '=', heldByW2)
      .execute();
    expect((await s.sweepStaleSessions({ staleAfterMs: 3_600_000 })).released_claim_ids).toEqual([heldByW2]);

    const history = await s.listCoordinationClaims({});
    expect(
      history.filter((c) => c.target_kind === 'deploy_serialization').map((c) => [c.claim_id, c.release_reason]),
    ).toEqual([
      [heldByW1, 'retired lock'],
      [heldByW2, 'stale_session_sweep'],
    ]);
  });
});

describe('C5 sessions end reports the sticky holds as they stand when the end commits', () => {
  let pause: Client; // holds the locks that stop the end at a chosen point
  beforeEach(async () => {
    pause = new Client({ connectionString: t.url });
    await pause.connect();
    await s.registerSession({ sessionId: 'w1-other', actorId: 'alice', project: 'web' });
  });
  afterEach(async () => {
    await pause.end();
  });

  /** How many connections to this database wait for a lock of one of these kinds. */
  const waitingOn = async (events: string[]) =>
    Number(
      (
        await pause.query(
          `SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = ANY($1)`,
          [events],
        )
      ).rows[0].n,
    );
  /** w1's end, stopped after it locked its session's row, at the release of claim `claimId` (locked here until COMMIT). */
  const endStoppedAt = async (claimId: number) => {
    await pause.query('BEGIN');
    await pause.query('SELECT 1 FROM work_claims WHERE claim_id = $1 FOR UPDATE', [claimId]);
    const ending = s.endSession({ sessionId: 'w1' });
    await untilTrue(async () => (await waitingOn(['transactionid', 'tuple'])) === 1, 'the end to wait for the claim');
    return { ending };
  };
  /** The errors of those that failed. */
  const failuresOf = async (ops: Promise<unknown>[]) =>
    (await Promise.allSettled(ops)).flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
  const alice = (claimId: number) =>
    s.releaseWorkClaim({ actingSessionId: 'w1-other', claimId, reason: 'suite finished' });

  test('C5 C9 a hold its actor releases while the end commits is listed as kept only if it was still held at the commit', async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    // Stop the end at its commit: a deferred trigger on the session's end waits for a lock held here.
    await sql`CREATE FUNCTION test_pause_end() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_advisory_xact_lock(4747001); RETURN NULL; END $$`.execute(t.db);
    await sql`CREATE CONSTRAINT TRIGGER test_pause_end AFTER UPDATE ON sessions DEFERRABLE INITIALLY DEFERRED
                FOR EACH ROW WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL) EXECUTE FUNCTION test_pause_end()`.execute(
      t.db,
    );
    await pause.query('SELECT pg_advisory_lock(4747001)');
    const ending = s.endSession({ sessionId: 'w1' });
    await untilTrue(async () => (await waitingOn(['advisory'])) === 1, 'the end to reach its commit');
    let releaseDone = false;
    const releasing = alice(qa.claim.claim_id).finally(() => (releaseDone = true));
    await untilTrue(
      async () => releaseDone || (await waitingOn(['transactionid', 'tuple'])) > 0,
      'the release to finish or to wait for the end',
    );
    const releasedBeforeTheEndCommitted = releaseDone;
    await pause.query('SELECT pg_advisory_unlock(4747001)');
    const ended = await ending;
    await releasing;
    expect(ended.ended).toBe(true);
    expect({
      releasedBeforeTheEndCommitted,
      listedAsKept: ended.retained_sticky_claims.some((c) => c.claim_id === qa.claim.claim_id),
    }).toEqual({ releasedBeforeTheEndCommitted, listedAsKept: !releasedBeforeTheEndCommitted });
    expect(await liveRow(qa.claim.claim_id)).toMatchObject({ released_by_session_id: 'w1-other' });
  });

  test("C5 W9 a hold its actor released while the end waited for a waiting line is neither kept nor the end's release", async () => {
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    await s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-2' });
    await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2', join: { resumeCommand: 'yoke again' } }),
    );
    // The end cancels w1's wait on lab-2 under that line's lock, after its first read of w1's claims.
    await pause.query(`SELECT pg_advisory_lock(hashtextextended('qa_line:lab-2', 0))`);
    const ending = s.endSession({ sessionId: 'w1' });
    await untilTrue(async () => (await waitingOn(['advisory'])) === 1, "the end to wait for lab-2's line");
    await alice(qa.claim.claim_id);
    await pause.query(`SELECT pg_advisory_unlock(hashtextextended('qa_line:lab-2', 0))`);
    const ended = await ending;
    expect(ended.ended).toBe(true);
    expect(ended.retained_sticky_claims).toEqual([]);
    expect(ended.released_claims.map((c) => c.claim_id)).not.toContain(qa.claim.claim_id);
    expect(await liveRow(qa.claim.claim_id)).toMatchObject({ released_by_session_id: 'w1-other' });
  });

  test('C5 C9 a release of a sticky hold made by its own session while the session ends does not deadlock with the end', async () => {
    const item = await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    const qa = await s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-1' });
    // The end holds the session's row and stops at the release of w1's item (its row is locked
    // here); meanwhile the session's own release of its lab-1 hold (as a QA execution's give-back
    // records it: by that session) locks the claim and then, for its released_by_session_id,
    // waits for the session's row.
    const { ending } = await endStoppedAt(item.claim.claim_id);
    const releasing = s.releaseWorkClaim({ actingSessionId: 'w1', claimId: qa.claim.claim_id, reason: 'suite done' });
    await untilTrue(
      async () => (await waitingOn(['transactionid', 'tuple'])) === 2,
      "the release to wait for the end's row",
    );
    await pause.query('COMMIT');
    expect(await failuresOf([ending, releasing])).toEqual([]);
    expect((await ending).ended).toBe(true);
    expect(await liveRow(qa.claim.claim_id)).toMatchObject({ released_by_session_id: 'w1' });
  });

  test('C5 W7 W9 a release that serves the ending session its turn does not deadlock with the end', async () => {
    const item = await s.takeItem({ sessionId: 'w1', item: 'WEB-1' });
    const lab2 = await s.acquireCoordinationClaim({ sessionId: 'w2', key: 'QA_HOST:lab-2' });
    await refusalOf(
      s.acquireCoordinationClaim({ sessionId: 'w1', key: 'QA_HOST:lab-2', join: { resumeCommand: 'yoke again' } }),
    );
    // The end stops at the release of w1's item (its row is locked here), holding what it took before.
    const { ending } = await endStoppedAt(item.claim.claim_id);
    // w2's release of lab-2 serves the line: its oldest waiter is still w1 (its end has not committed).
    const releasing = s.releaseWorkClaim({ actingSessionId: 'w2', claimId: lab2.claim.claim_id, reason: 'done' });
    await untilTrue(
      async () => (await waitingOn(['transactionid', 'tuple', 'advisory'])) === 2,
      'the release to wait for the end',
    );
    await pause.query('COMMIT');
    expect(await failuresOf([ending, releasing])).toEqual([]);
    const waits = await t.db
      .selectFrom('qa_test_machine_waits')
      .select(['state', 'cancel_reason'])
      .where('session_id', '=', 'w1')
      .execute();
    expect(waits.map((w) => w.state)).toEqual(['cancelled']);
  });
});
