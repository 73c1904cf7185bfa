import type { Command } from 'commander';
import type { ItemView } from '../../activities/items';
import type { RequirementsView } from '../../activities/memberAuthority';
import { actingSession, BaseOptions, commandAction, nonEmpty } from '../context';
import { table } from '../output';
import type { Store } from '../../activities/store';

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

function requirementsText(v: RequirementsView): string {
  const m = v.membership;
  const lines = [`${v.item} (${v.project})${v.title ? `: ${v.title}` : ''}`];
  if (m) {
    lines.push(
      `member of run ${m.run_id} (${m.run_status})${m.ended ? `, membership ended: ${m.ended_by}${m.later_run_id ? ` -> ${m.later_run_id}` : ''}` : ''}; read under project ${m.project}`,
      `selection${v.selection_derived ? ' (derived)' : ''}: ${v.requirement_selection?.join(', ') || '(none)'}`,
    );
  }
  lines.push(
    table(
      ['REQUIREMENT', 'PHASE', 'TARGET', 'PLAN', 'BLOCKING', 'STATE', ...(m ? ['SELECTED'] : [])],
      v.requirements.map((r) => [
        r.requirement_id,
        r.qa_phase,
        r.target_env,
        r.plan_id,
        r.blocking ? 'yes' : 'no',
        r.waived ? 'waived' : r.superseded ? 'superseded' : r.bound_run_id ? `bound to ${r.bound_run_id}` : 'open',
        ...(m ? [r.selected ? 'yes' : 'no'] : []),
      ]),
    ),
  );
  return lines.join('\n');
}

/** Loaded on use: the item views pull in the completion walk. */
async function itemsOf(db: Store) {
  const { itemActivities } = await import('../../activities/items');
  return itemActivities({ db });
}

/** `yoke items`: item status, delivery evidence and the completion runs it is read through (D7, D8). */
export function registerItems(program: Command): void {
  const items = program.command('items').description('backlog items: status, delivery evidence, completion runs');

  items
    .command('get')
    .description('an item with its delivery_evidence, completed_deliveries and completion runs')
    .argument('<item>', 'PREFIX-N')
    .action(
      commandAction(BaseOptions, async ({ db }, _o, [item]) => (await itemsOf(db)).getItem({ item: item! }), itemText),
    );

  items
    .command('list')
    .description('items, with status and the run their completion walk reads')
    .option('--project <project>', 'only this project')
    .option('--status <status>', 'only this status')
    .action(
      commandAction(
        BaseOptions.extend({ project: nonEmpty.optional(), status: nonEmpty.optional() }),
        async ({ db }, o) => (await itemsOf(db)).listItems(o),
        (rows) =>
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
      ),
    );

  items
    .command('requirements')
    .description("an item's requirements (QA obligations); with --run, read through that run's stored member (C10)")
    .argument('<item>', 'PREFIX-N')
    .option(
      '--run <run>',
      "read under the run's stored member: its project and selection, even after the membership ended",
    )
    .action(
      commandAction(
        BaseOptions.extend({ run: nonEmpty.optional() }),
        async ({ db }, o, [item]) => {
          const { memberAuthorityActivities } = await import('../../activities/memberAuthority');
          return memberAuthorityActivities({ db }).readRequirements({ item: item!, runId: o.run });
        },
        requirementsText,
      ),
    );

  items
    .command('update')
    .description('set an item field: status (open|in_progress|delivery_ready|done|cancelled) or lane PATH')
    .argument('<item>', 'PREFIX-N')
    .argument('<field>', 'status | lane')
    .argument('<value>', 'the new value')
    .option('--session <id>', 'acting session (default $YOKE_SESSION_ID)')
    .action(
      commandAction(
        BaseOptions,
        async ({ db }, o, [item, field, value]) =>
          (await itemsOf(db)).updateItem({ sessionId: actingSession(o), item: item!, field: field!, value: value! }),
        itemText,
      ),
    );
}
