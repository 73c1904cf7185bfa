import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs } from 'kysely';

/**
 * Counts every statement kysely runs (BEGIN/COMMIT of a transaction excluded), as each result
 * comes back: a statement compiled once (db/compiledOnce.ts) is compiled once and run many times.
 */
export class CountingPlugin implements KyselyPlugin {
  count = 0;
  transformQuery(args: PluginTransformQueryArgs) {
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs) {
    this.count++;
    return args.result;
  }
}
