import { CompiledQuery, sql, type RawBuilder } from 'kysely';
import { prepared, type Executor } from './pool';

type Placeholders<P extends string> = { readonly [K in P]: RawBuilder<unknown> };

/** A statement whose text was compiled once; each call sends only its values. */
export type CompiledStatement<P extends string, R> = (
  db: Executor,
  values: { readonly [K in P]: unknown },
) => Promise<R[]>;

/**
 * Issue 16: a hot statement (the one-statement acquire and release) compiled once per process
 * instead of on every call. Building and compiling the claim CTE's template each time cost
 * the client more than the bare pair's whole statement. `build` receives one placeholder per
 * named parameter, numbered in the order the statement first uses them (a name used twice is
 * the same parameter, a name it never uses is not sent), so the text depends only on the
 * statement's shape; it is sent as a named prepared statement (see `prepared`). Every value
 * goes through a placeholder: a value written into the text would be the first call's forever.
 */
export function compiledOnce<const P extends string, R>(
  names: readonly P[],
  build: (p: Placeholders<P>) => RawBuilder<R>,
): CompiledStatement<P, R> {
  let compiled: { text: string; order: P[] } | undefined;
  const compile = (db: Executor) => {
    const order: P[] = [];
    const placeholders = {} as Placeholders<P>;
    for (const name of names)
      Object.defineProperty(placeholders, name, {
        get: () => {
          if (!order.includes(name)) order.push(name);
          return sql.raw(`$${order.indexOf(name) + 1}`);
        },
      });
    const { sql: text, parameters } = prepared(build(placeholders)).compile(db);
    if (parameters.length > 0) throw new Error('compiledOnce: a value was written into the text, not a placeholder');
    const unused = order.filter((_, i) => !new RegExp(`\\$${i + 1}(?!\\d)`).test(text));
    if (unused.length > 0) throw new Error(`compiledOnce: placeholders taken but not used: ${unused.join(', ')}`);
    return { text, order };
  };
  return async (db, values) => {
    compiled ??= compile(db);
    const { rows } = await db.executeQuery<R>(
      CompiledQuery.raw(
        compiled.text,
        compiled.order.map((name) => values[name]),
      ),
    );
    return rows;
  };
}
