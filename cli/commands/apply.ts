import type { Command } from 'commander';
import { z } from 'zod';
import { nonEmpty, parseOptions, withDb, BaseOptions } from '../context';
import { emit } from '../output';

export function registerApply(program: Command): void {
  program
    .command('apply')
    .description('apply a project definition (environments, hosts, flows, items, QA obligations); idempotent')
    .requiredOption('-f, --file <file>', 'project definition (YAML)')
    .option('--dry-run', 'print the change without writing it')
    .action(async (raw) => {
      const o = parseOptions(BaseOptions.extend({ file: nonEmpty, dryRun: z.boolean().optional() }), raw);
      const { projectDefinitionActivities } = await import('../../activities/projectDefinition');
      const r = await withDb(({ db, config }) =>
        projectDefinitionActivities({ db, maxBytes: config.applyMaxBytes }).applyProjectDefinition({
          file: o.file,
          dryRun: o.dryRun,
        }),
      );
      emit(!!o.json, r, () => {
        const changed = r.changes.filter((c) => c.action !== 'unchanged');
        const head = `${r.dry_run ? 'would apply' : 'applied'} ${r.project}: ${r.summary.create} to create, ${r.summary.update} to update, ${r.summary.unchanged} unchanged`;
        return [head, ...changed.map((c) => `  ${c.action === 'create' ? '+' : '~'} ${c.kind} ${c.name}`)].join('\n');
      });
    });
}
