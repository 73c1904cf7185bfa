import { heldRefusal, type Holder } from '../../domain/claimRefusals';

const holder = (project: string | null): Holder => ({
  claim_id: 7,
  session_id: 's1',
  actor_id: 'alice',
  claimed_at: '2026-12-03T00:00:00.000Z',
  heartbeat_at: '2026-12-03T00:00:00.000Z',
  project,
  item: null,
});

test('C3 C8 a claim_held refusal recovers through the steering seat of the holder project, and through no seat when the holder names no project', () => {
  const wanted = { kind: 'qa_admission' as const, label: 'QA_HOST:lab-1', key: 'QA_HOST:lab-1', project: null };
  expect(heldRefusal(wanted, holder('web')).recovery).toContain(
    'yoke coordination-claim release --key QA_HOST:lab-1 --claim-id 7 --holder-session-id s1 --reason R',
  );
  // the operator release would be refused holder_project_unknown: only the holder's own release is named
  const orphan = heldRefusal(wanted, holder(null)).recovery;
  expect(orphan).toContain('yoke claims work release --claim-id 7 --reason R');
  expect(orphan).toContain('names no project');
  expect(orphan).not.toContain('coordination-claim release');
  const grant = { kind: 'route_qualification' as const, label: 'tok', key: 'ROUTE_QUALIFICATION:tok', project: 'web' };
  expect(heldRefusal(grant, holder('web')).recovery).toContain('--project web --key ROUTE_QUALIFICATION:tok');
  expect(heldRefusal(grant, holder(null)).recovery).not.toContain('--project P');
});
