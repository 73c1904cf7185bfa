import { randomUUID } from 'node:crypto';
import { testMachineName } from '../../domain/testMachineName';
import type { Command } from 'commander';
import { z } from 'zod';
import type { CheckOutcome, CheckRecord, TestMachineView, WaitView } from '../../activities/testMachines';
import type { Reservation } from '../../activities/waitingLine';
import type { CheckKind } from '../../domain/checkKinds';
import { CREDENTIAL_RECOVERY, CredentialName } from '../../domain/credentials';
import { testMachineUnknown } from '../../domain/claimRefusals';
import { YokeError, usageError } from '../../domain/errors';
import { HostAddress, SshUser } from '../../domain/projectDefinition';
import type { CheckInput } from '../../workflows/definitions';
import type { testMachineCheck } from '../../workflows/testMachineCheck';
import {
  actingSession,
  BaseOptions,
  commandAction,
  nonEmpty,
  parseOptions,
  withDb,
  type CommandContext,
  wholeNumber,
} from '../context';
import { emit, table, warn } from '../output';
import { reportLine } from './coordinationClaim';

const AddOptions = BaseOptions.extend({
  host: HostAddress,
  port: wholeNumber.pipe(z.number().int().min(1).max(65535)),
  user: SshUser,
  credential: CredentialName.optional(),
  identityFile: nonEmpty.optional(),
  hostKeyFile: nonEmpty.optional(),
  verifyCommand: nonEmpty.optional(),
  captureCommand: nonEmpty.optional(),
});

// Loaded on use: ssh2 and the Temporal workflow definitions cost startup time every other command would pay.
async function machines(ctx: CommandContext) {
  const { testMachineActivities } = await import('../../activities/testMachines');
  return testMachineActivities({ db: ctx.db, ssh: ctx.config.ssh, line: ctx.line });
}

function machineTable(rows: TestMachineView[]): string {
  return table(
    ['MACHINE', 'ADDRESS', 'HEALTH', 'LAST VERIFICATION', 'HOLDER', 'WAITING', 'HOST KEY'],
    rows.map((m) => [
      m.name,
      `${m.user}@${m.host}:${m.port}`,
      m.healthy ? 'healthy' : 'UNHEALTHY',
      m.last_verification
        ? `${m.last_verification.passed ? 'passed' : m.last_verification.reason} ${m.last_verification.finished_at}`
        : 'never',
      m.holder ? `${m.holder.session_id}${m.holder.reserved_until ? ' (reserved)' : ''}` : 'free',
      m.waiting,
      m.host_key_fingerprint,
    ]),
  );
}

function waitsTable(rows: WaitView[]): string {
  return table(
    ['MACHINE', 'POS', 'SESSION', 'STATE', 'QUEUED', 'RESUME', 'RATIONALE'],
    rows.map((w) => [
      w.test_machine,
      w.position,
      w.session_id + (w.session_live ? '' : ' (ended)'),
      w.state === 'reserved'
        ? `reserved until ${w.reserved_until}`
        : w.state + (w.cancel_reason ? ` (${w.cancel_reason})` : ''),
      w.queued_at,
      w.resume_command,
      w.rationale,
    ]),
  );
}

/**
 * verify / golden-capture run as a Temporal workflow so the SSH command is an activity that
 * heartbeats and can be cancelled; the CLI starts it and waits for its report.
 */
async function runCheck(ctx: CommandContext, name: string, sessionId: string, kind: CheckKind, json: boolean) {
  const testMachine = testMachineName(name); // C3: the workflow id and search attribute use the one spelling
  if (!(await (await machines(ctx)).listTestMachines({ name: testMachine })).length)
    throw testMachineUnknown(testMachine);
  // C1 W8: a check acts as its session; an unregistered or ended one is refused before a worker
  // is asked to run it (the check's hold would refuse it too, but only after waiting for a worker)
  const { sessionActivities } = await import('../../activities/sessions');
  await sessionActivities({ db: ctx.db }).requireSession({ sessionId });
  const client = await ctx.temporal.requireWorker();
  const { defineSearchAttributeKey, SearchAttributeType } = await import('@temporalio/common');
  const { checkWorkflowId, YOKE_TEST_MACHINE } = await import('../../workflows/definitions');
  warn(json, `${kind === 'verification' ? 'verifying' : 'capturing golden state of'} ${testMachine} over SSH...`);
  const input: CheckInput = { testMachine, sessionId, kind };
  const handle = await client.workflow.start<typeof testMachineCheck>('testMachineCheck', {
    workflowId: checkWorkflowId(testMachine, kind, randomUUID()),
    taskQueue: ctx.config.taskQueue,
    args: [input],
    typedSearchAttributes: [
      { key: defineSearchAttributeKey(YOKE_TEST_MACHINE, SearchAttributeType.KEYWORD), value: testMachine },
    ],
  });
  const { boundedResult } = await import('../temporal');
  // Ctrl-C ends the check, not only this process: left alone, the check would hold the machine
  // (and run its command on the host) until the SSH command timeout. Cancelling it releases the
  // machine and records nothing, as a check that did not finish does. The exit waits (bounded)
  // for the check to end, so the machine is released when the command says it is.
  let interrupted = false;
  const interrupt = (signal: NodeJS.Signals) => {
    interrupted = true;
    warn(
      json,
      `interrupted (${signal}): cancelling the ${kind} of ${testMachine}; nothing is recorded and the machine is released`,
    );
    void handle
      .cancel()
      .then(() => Promise.race([handle.result(), new Promise((resolve) => setTimeout(resolve, 30_000).unref())]))
      .catch(() => undefined)
      .finally(() => process.exit(130));
  };
  process.once('SIGINT', interrupt).once('SIGTERM', interrupt);
  try {
    return await boundedResult<{ check: CheckRecord; reservations: Reservation[]; outcome: CheckOutcome }>(
      ctx.temporal,
      handle,
      {
        // the SSH connect and command timeouts bound the check itself; a minute more for its records
        limitMs: ctx.config.ssh.connectTimeoutMs + ctx.config.ssh.commandTimeoutMs + 60_000,
        what: `the ${kind} of ${testMachine}`,
      },
    );
  } catch (err) {
    // the cancelled check's end is the interrupt's to report (exit 130), not an error of this command
    if (interrupted) return new Promise<never>(() => undefined);
    throw err;
  } finally {
    process.off('SIGINT', interrupt).off('SIGTERM', interrupt);
  }
}

export function registerTestMachine(program: Command): void {
  const tm = program
    .command('test-machine')
    .description('physical QA test machines reached over SSH, their health and waiting lines');

  tm.command('add')
    .description('add a machine and pin its SSH host key')
    .argument('<name>', 'machine name (its key is QA_HOST:<name>)')
    .requiredOption('--host <host>', 'address')
    .requiredOption('--port <port>', 'SSH port')
    .requiredOption('--user <user>', 'SSH user')
    .option(
      '--credential <name>',
      "the worker's key to log in with: a file name in YOKE_SSH_KEY_DIR (default .yoke/ssh-keys), never a path",
    )
    .option(
      '--identity-file <file>',
      "a private key: without --credential, copied into the worker's key directory as NAME (admins; recorded as --credential NAME); with --credential, only to pin the host key on first use from this process (never stored)",
    )
    .option('--host-key-file <file>', "the host's public key to pin (default: trust on first use, recorded)")
    .option('--verify-command <cmd>', 'command whose success means the machine is healthy (default: true)')
    .option('--capture-command <cmd>', 'golden capture command (default: true)')
    .action(
      commandAction(
        AddOptions,
        async (ctx, o, [name]) => {
          // Issue 13: the worker never opens a path a user gives; it logs in with a key of its own.
          if (!o.credential && !o.identityFile) {
            throw usageError(
              'credential_required',
              `test-machine add ${name}: name the worker's key with --credential NAME`,
              {
                recovery: `${CREDENTIAL_RECOVERY}, e.g. cp KEY "$YOKE_SSH_KEY_DIR/${name}" && yoke test-machine add ${name} ... --credential ${name}; or pass --identity-file KEY and yoke copies it there`,
                details: { option: '--credential' },
              },
            );
          }
          // bad input is a usage error before anything is written or dialled
          if (o.identityFile) (await import('../../activities/hosts/ssh')).readIdentity(o.identityFile);
          if (o.credential) {
            const added = await (await machines(ctx)).addTestMachine({ name: name!, ...o, credential: o.credential });
            // the worker reads its keys here when it runs on this host (npm start): a missing one
            // is said now, not first at verify (credential_unknown)
            const missing = (await import('../../activities/hosts/ssh')).missingCredential(
              o.credential,
              ctx.config.ssh.keyDir,
            );
            if (missing)
              process.stderr.write(
                `warning: ${missing}: a worker reading ${ctx.config.ssh.keyDir} cannot log in to ${added.name} until it can (verify says credential_unknown)\n`,
              );
            return added;
          }
          // Issue 3's single-user form: an admin's key is copied into the worker's key directory as NAME
          const added = await (
            await machines(ctx)
          ).addTestMachineCopyingKey({ name: name!, ...o, identityFile: o.identityFile! });
          process.stderr.write(`note: ${added.note}\n`);
          return added;
        },
        (m) =>
          `added ${m.name} (${m.user}@${m.host}:${m.port}), host key ${m.host_key_fingerprint} pinned (${m.host_key_source})`,
      ),
    );

  tm.command('list')
    .description('machines with health, holder and line length')
    .action(commandAction(BaseOptions, async (ctx) => (await machines(ctx)).listTestMachines(), machineTable));

  tm.command('remove')
    .description('remove a machine nobody holds (its waits are cancelled)')
    .argument('<name>', 'machine')
    .action(
      commandAction(
        BaseOptions,
        async (ctx, _o, [name]) => (await machines(ctx)).removeTestMachine({ name: name! }),
        (r) => `removed ${r.name}${r.cancelled_waits ? `; cancelled ${r.cancelled_waits} wait(s)` : ''}`,
      ),
    );

  tm.command('repin')
    .description("re-pin a re-imaged machine's new host key in place: its waiting line and holds are kept (W3)")
    .argument('<name>', 'machine')
    .requiredOption('--host-key-file <file>', "the machine's new public host key (e.g. from ssh-keyscan)")
    .action(
      commandAction(
        BaseOptions.extend({ hostKeyFile: nonEmpty }),
        async (ctx, o, [name]) => (await machines(ctx)).repinHostKey({ name: name!, hostKeyFile: o.hostKeyFile }),
        (m) =>
          `re-pinned ${m.name}: host key ${m.host_key_fingerprint} (was ${m.previous_host_key_fingerprint}); ` +
          `its line is kept${m.healthy ? '' : `; it is unhealthy until a verify passes: yoke test-machine verify ${m.name}`}`,
      ),
    );

  for (const [command, kind] of [
    ['verify', 'verification'],
    ['golden-capture', 'golden_capture'],
  ] as const) {
    tm.command(command)
      .description(
        kind === 'verification'
          ? 'run the verification command over SSH and record the result (W2, W8)'
          : 'run the golden capture command over SSH and record it',
      )
      .argument('<name>', 'machine')
      .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
      .action(async (name: string, raw) => {
        const o = parseOptions(BaseOptions, raw);
        const sessionId = actingSession(o);
        const report = await withDb((ctx) => runCheck(ctx, name, sessionId, kind, !!o.json));
        reportLine(!!o.json, { reservations: report.reservations, warnings: [] });
        emit(
          !!o.json,
          report,
          () =>
            `${kind.replace('_', ' ')} of ${name}: ${report.check.passed ? 'passed' : `FAILED (${report.check.reason})`}${report.outcome.output_excerpt ? `\n${report.outcome.output_excerpt.trimEnd()}` : ''}`,
        );
        if (report.check.reason === 'credential_unknown') {
          throw new YokeError(
            'refusal',
            'credential_unknown',
            `the worker has no usable key for ${name}'s credential; recorded as a failed verification${report.outcome.output_excerpt ? ` (${report.outcome.output_excerpt.trim()})` : ''}`,
            CREDENTIAL_RECOVERY,
            { test_machine: name },
          );
        }
        if (report.check.reason === 'host_key_mismatch') {
          throw new YokeError(
            'refusal',
            'host_key_mismatch',
            `${name} presented a host key other than the pinned one; recorded as a failed verification`,
            `if the machine was legitimately re-imaged, re-pin it (its waiting line is kept): yoke test-machine repin ${name} --host-key-file NEW_KEY.pub, then yoke test-machine verify ${name} --session ${sessionId}`,
            { test_machine: name },
          );
        }
        if (!report.check.passed) {
          throw new YokeError(
            'refusal',
            `${kind}_failed`,
            `${kind.replace('_', ' ')} of ${name} failed: ${report.check.reason}`,
            // The way back is a passing verification, so the hint names the command that records one.
            `inspect the machine, then verify it again: yoke test-machine verify ${name} --session ${sessionId}; ${report.check.kind === 'verification' ? 'it stays unhealthy (its line waits) until a verification or a golden capture passes' : 'its health is unchanged'}`,
            { test_machine: name, reason: report.check.reason },
          );
        }
      });
  }

  tm.command('waits')
    .description('the waiting line: position, session, state, queued_at, resume_command, rationale')
    .argument('[name]', 'only this machine')
    .option('--all', 'include settled waits (granted, cancelled)')
    .action(
      commandAction(
        BaseOptions.extend({ all: z.boolean().optional() }),
        async (ctx, o, [name]) => {
          const acts = await machines(ctx);
          const rows = await acts.listWaits({ testMachine: name, all: o.all });
          // A typo must not read as an empty line: a machine nobody added (and no line it left) is named.
          if (name && !rows.length && !(await acts.listTestMachines({ name: testMachineName(name) })).length)
            throw testMachineUnknown(testMachineName(name));
          return rows;
        },
        waitsTable,
      ),
    );
}
