import type { Command } from 'commander';
import { z } from 'zod';
import { sessionActivities } from '../../activities/sessions';
import { nonEmpty, parseOptions, withDb } from '../context';
import { emit, table } from '../output';
import { claimTarget } from '../render';

const SessionOpt = z.object({ session: nonEmpty, json: z.boolean().optional() });
const RegisterOptions = SessionOpt.extend({
  actor: nonEmpty, project: nonEmpty.optional(), machine: nonEmpty.optional(),
  harness: z.enum(['claude', 'codex', 'cursor', 'other']).optional(),
});

export function registerSessions(program: Command): void {
  const sessions = program.command('sessions').description('registered sessions that claims belong to');

  sessions.command('register').description('register (or re-register) a session')
    .requiredOption('--session <id>', 'session id').requiredOption('--actor <actor>', 'actor id (a person or an agent identity)')
    .option('--project <project>', 'project').option('--machine <machine>', 'machine id')
    .option('--harness <harness>', 'claude | codex | cursor | other').option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(RegisterOptions, raw);
      const r = await withDb(({ db }) => sessionActivities({ db }).registerSession({ sessionId: o.session, actorId: o.actor, project: o.project, machine: o.machine, harness: o.harness }));
      emit(!!o.json, { ...r.session, registered: r.registered }, () => `${r.registered ? 'registered' : 're-registered'} session ${r.session.session_id} for ${r.session.actor_id}`);
    });

  sessions.command('heartbeat').description('keep a session and its claims alive')
    .requiredOption('--session <id>', 'session id').option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(SessionOpt, raw);
      const s = await withDb(({ db }) => sessionActivities({ db }).heartbeatSession({ sessionId: o.session }));
      emit(!!o.json, s, () => `session ${s.session_id} alive at ${s.heartbeat_at}`);
    });

  sessions.command('end').description('end a session; its non-sticky claims are released, sticky holds stay (C5)')
    .requiredOption('--session <id>', 'session id')
    .option('--if-claim-free', 'end only if the session holds no live non-sticky claim')
    .option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(SessionOpt.extend({ ifClaimFree: z.boolean().optional() }), raw);
      const r = await withDb(({ db, line }) => sessionActivities({ db, line }).endSession({ sessionId: o.session, ifClaimFree: o.ifClaimFree }));
      for (const w of r.warnings) process.stderr.write(`warning: ${w}\n`);
      emit(!!o.json, { ...r.session, ended: r.ended, released_claims: r.released_claims, retained_sticky_claims: r.retained_sticky_claims, blocking_claims: r.blocking_claims }, () => {
        const lines = [r.ended ? `ended session ${r.session.session_id}` : `session ${r.session.session_id} not ended${r.blocking_claims.length ? ' (holds claims)' : ' (already ended)'}`];
        for (const c of r.released_claims) lines.push(`  released ${claimTarget(c)} (claim ${c.claim_id})`);
        for (const c of r.retained_sticky_claims) lines.push(`  kept sticky ${claimTarget(c)} (claim ${c.claim_id}); an operator releases it`);
        for (const c of r.blocking_claims) lines.push(`  still holds ${claimTarget(c)} (claim ${c.claim_id})`);
        return lines.join('\n');
      });
    });

  sessions.command('list').description('list sessions')
    .option('--project <project>', 'only this project').option('--active-only', 'only live sessions').option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(z.object({ project: nonEmpty.optional(), activeOnly: z.boolean().optional(), json: z.boolean().optional() }), raw);
      const rows = await withDb(({ db }) => sessionActivities({ db }).listSessions(o));
      emit(!!o.json, rows, () => table(['SESSION', 'ACTOR', 'PROJECT', 'MACHINE', 'HARNESS', 'HEARTBEAT', 'ENDED'],
        rows.map((s) => [s.session_id, s.actor_id, s.project, s.machine_id, s.harness, s.heartbeat_at, s.ended_at ?? s.terminated_at])));
    });
}
