import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs } from 'kysely';

/** Counts every statement kysely sends (BEGIN/COMMIT of a transaction excluded). */
export class CountingPlugin implements KyselyPlugin {
  count = 0;
  transformQuery(args: PluginTransformQueryArgs) {
    this.count++;
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs) {
    return args.result;
  }
}
