import type { Command } from 'commander';
import { z } from 'zod';
import { BaseOptions, commandAction, nonEmpty } from '../context';

export function registerApply(program: Command): void {
  program
    .command('apply')
    .description('apply a project definition (environments, hosts, flows, items, QA obligations); idempotent')
    .requiredOption('-f, --file <file>', 'project definition (YAML)')
    .option('--dry-run', 'print the change without writing it')
    .action(
      commandAction(
        BaseOptions.extend({ file: nonEmpty, dryRun: z.boolean().optional() }),
        async ({ db, config }, o) => {
          const { projectDefinitionActivities } = await import('../../activities/projectDefinition');
          const applied = await projectDefinitionActivities({
            db,
            maxBytes: config.applyMaxBytes,
            keyDir: config.ssh.keyDir,
          }).applyProjectDefinition({ file: o.file, dryRun: o.dryRun });
          for (const w of applied.warnings) process.stderr.write(`warning: ${w}\n`);
          return applied;
        },
        (r) => {
          const changed = r.changes.filter((c) => c.action === 'create' || c.action === 'update');
          const kept = r.changes.filter((c) => c.action === 'kept');
          // a dry run says what it would do; an apply says what it did
          const head = r.dry_run
            ? `would apply ${r.project}: ${r.summary.create} to create, ${r.summary.update} to update, ${r.summary.unchanged} unchanged`
            : `applied ${r.project}: ${r.summary.create} created, ${r.summary.update} updated, ${r.summary.unchanged} unchanged`;
          return [
            head + (kept.length ? `, ${kept.length} not in the file (kept: apply removes nothing)` : ''),
            ...changed.map(
              (c) =>
                `  ${c.action === 'create' ? '+' : '~'} ${c.kind} ${c.name}${c.fields?.length ? ` (${c.fields.join(', ')})` : ''}`,
            ),
            ...kept.map((c) => `  = ${c.kind} ${c.name} (not in the file: kept)`),
          ].join('\n');
        },
      ),
    );
}
