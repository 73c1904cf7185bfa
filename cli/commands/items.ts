import type { Command } from 'commander';
import { z } from 'zod';
import type { ItemView } from '../../activities/items';
import { actingSession, nonEmpty, parseOptions, withDb } from '../context';
import { emit, table } from '../output';

const Json = z.object({ json: z.boolean().optional() });

function itemText(v: ItemView): string {
  const lines = [
    `${v.item} (${v.project})${v.title ? `: ${v.title}` : ''}`,
    `status ${v.status}${v.status_changed_at ? ` since ${v.status_changed_at}` : ''}`,
    `completion flow: ${v.completion_flow ?? '(none: merge-only)'}; reads run ${v.completion_run ?? '(none)'}`,
    `completion runs: ${v.completion_runs.map((r) => `${r.run_id} ${r.settling ? 'settling' : r.status}`).join(', ') || '(none)'}`,
    `completed deliveries: ${v.completed_deliveries.map((d) => `${d.run} -> ${d.environment} @ ${d.candidate.slice(0, 12)}`).join('; ') || '(none)'}`,
  ];
  if (v.dependencies.length)
    lines.push(
      `depends on: ${v.dependencies.map((d) => `${d.item}${d.environment ? ` @${d.environment}` : ''} ${d.satisfied ? 'ok' : 'unsatisfied'}`).join(', ')}`,
    );
  return lines.join('\n');
}

/** `yoke items`: item status, delivery evidence and the completion runs it is read through (D7, D8). */
export function registerItems(program: Command): void {
  const items = program.command('items').description('backlog items: status, delivery evidence, completion runs');

  items
    .command('get')
    .description('an item with its delivery_evidence, completed_deliveries and completion runs')
    .argument('<item>', 'PREFIX-N')
    .option('--json', 'print JSON')
    .action(async (item: string, raw) => {
      const o = parseOptions(Json, raw);
      const { itemActivities } = await import('../../activities/items');
      const v = await withDb(({ db }) => itemActivities({ db }).getItem({ item }));
      emit(!!o.json, v, () => itemText(v));
    });

  items
    .command('list')
    .description('items, with status and the run their completion walk reads')
    .option('--project <project>', 'only this project')
    .option('--status <status>', 'only this status')
    .option('--json', 'print JSON')
    .action(async (raw) => {
      const o = parseOptions(Json.extend({ project: nonEmpty.optional(), status: nonEmpty.optional() }), raw);
      const { itemActivities } = await import('../../activities/items');
      const rows = await withDb(({ db }) => itemActivities({ db }).listItems(o));
      emit(!!o.json, rows, () =>
        table(
          ['ITEM', 'PROJECT', 'STATUS', 'COMPLETION RUN', 'DELIVERED TO', 'TITLE'],
          rows.map((r) => [
            r.item,
            r.project,
            r.status,
            r.completion_run,
            [...new Set(r.completed_deliveries.map((d) => d.environment))].join(',') || null,
            r.title,
          ]),
        ),
      );
    });

  items
    .command('update')
    .description('set an item field: status (open|in_progress|delivery_ready|done|cancelled) or lane PATH')
    .argument('<item>', 'PREFIX-N')
    .argument('<field>', 'status | lane')
    .argument('<value>', 'the new value')
    .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
    .option('--json', 'print JSON')
    .action(async (item: string, field: string, value: string, raw) => {
      const o = parseOptions(Json.extend({ session: nonEmpty.optional() }), raw);
      const sessionId = actingSession(o);
      const { itemActivities } = await import('../../activities/items');
      const v = await withDb(({ db }) => itemActivities({ db }).updateItem({ sessionId, item, field, value }));
      emit(!!o.json, v, () => itemText(v));
    });
}
