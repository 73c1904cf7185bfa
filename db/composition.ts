import { sql } from 'kysely';
import type { Executor } from './pool';

/**
 * D9: the delivery-ready items of a memberless item-scoped QA run's project whose completion
 * flow is this flow and that no other live custody release holds, in item order.
 */
export async function owedDeliveryReadyItems(
  db: Executor,
  run: { run_id: string; project_id: number },
  flowId: number,
): Promise<string[]> {
  const { rows } = await sql<{ item: string }>`
    SELECT p.item_prefix || '-' || i.number AS item
      FROM backlog_items i
      JOIN projects p ON p.project_id = i.project_id
     WHERE i.project_id = ${run.project_id}
       AND i.status = 'delivery_ready'
       AND coalesce(i.completion_flow_id,
             (SELECT f.flow_id FROM flows f WHERE f.project_id = i.project_id AND f.completion_flow)) = ${flowId}
       AND NOT EXISTS (
         SELECT 1 FROM deployment_run_items m
           JOIN deployment_runs r ON r.run_id = m.run_id
           JOIN flows f ON f.flow_id = r.flow_id
          WHERE m.item_id = i.item_id AND r.run_id <> ${run.run_id}
            AND r.status IN ('created', 'executing') AND f.delivery_custody)
     ORDER BY i.number`.execute(db);
  return rows.map((r) => r.item);
}
