// The layer rules of DESIGN.md as one lint rule: every relative import is resolved to the
// top-level folder it lands in, and that folder must be one the importing layer may reach.
// Folders not named here (workers/, scripts/, bench/, test/) are entry points and may import
// anything.
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');

/**
 * For each layer: the layers it may import values from (`values`), and those it may only
 * import types from (`types`); or the layers it must never reach (`never`).
 */
export const LAYERS = {
  domain: { values: ['domain'], why: 'domain/ is pure and imports nothing of ours' },
  config: { values: ['domain', 'config'], why: 'config/ reads only domain/' },
  db: { values: ['domain', 'config', 'db'], why: 'db/ builds on domain/ and config/ only' },
  temporal: {
    values: ['domain', 'config', 'temporal', 'workflows'],
    // The ports it implements (e.g. the waiting line's LineNotifier) are declared by activities.
    types: ['activities'],
    why: 'temporal/ adapts Temporal for callers; it knows workflow messages and implements ports activities declare',
  },
  activities: {
    never: ['workflows', 'cli', 'workers', 'web'],
    why: 'activities never import workflows/ or cli/ (signals to workflows go through temporal/)',
  },
  operations: {
    never: ['workflows', 'cli', 'workers', 'web'],
    why: 'operations never import workflows/ or cli/ (signals to workflows go through temporal/)',
  },
  workflows: {
    values: ['domain', 'workflows'],
    types: ['activities'],
    why: 'workflows import domain/ and activities as types only (the worker bundles them deterministically)',
  },
  cli: { never: ['db', 'workers'], why: 'cli/ reaches the database through activities or operations, never db/' },
  web: { never: ['db', 'workers'], why: 'web/ reaches the database through activities or operations, never db/' },
};

function layerOf(file) {
  const rel = path.relative(ROOT, file);
  if (rel.startsWith('..') || path.isAbsolute(rel)) return undefined;
  return rel.split(path.sep)[0];
}

function allowed(rule, target, typeOnly) {
  if (rule.never) return !rule.never.includes(target);
  if (rule.values.includes(target)) return true;
  return typeOnly && (rule.types ?? []).includes(target);
}

const layerRule = {
  meta: {
    type: 'problem',
    docs: { description: 'imports follow the layer rules of DESIGN.md' },
    schema: [],
    messages: { crossing: '{{from}}/ may not import {{target}}/{{kind}}: {{why}}' },
  },
  create(context) {
    const file = context.filename;
    const from = layerOf(file);
    const rule = from && LAYERS[from];
    if (!rule) return {};
    const check = (node, source, typeOnly) => {
      if (typeof source !== 'string' || !source.startsWith('.')) return;
      const target = layerOf(path.resolve(path.dirname(file), source));
      if (!target || allowed(rule, target, typeOnly)) return;
      context.report({
        node,
        messageId: 'crossing',
        data: { from, target, why: rule.why, kind: typeOnly ? ' (even as types)' : '' },
      });
    };
    const typeOnlyImport = (node) =>
      node.importKind === 'type' ||
      (node.specifiers.length > 0 && node.specifiers.every((s) => s.importKind === 'type'));
    return {
      ImportDeclaration: (node) => check(node, node.source.value, typeOnlyImport(node)),
      ExportNamedDeclaration: (node) => node.source && check(node, node.source.value, node.exportKind === 'type'),
      ExportAllDeclaration: (node) => check(node, node.source.value, node.exportKind === 'type'),
      ImportExpression: (node) => check(node, node.source.value, false),
      TSImportType: (node) => check(node, node.argument?.literal?.value ?? node.argument?.value, true),
      CallExpression: (node) => {
        if (
          node.callee.type === 'Identifier' &&
          node.callee.name === 'require' &&
          node.arguments[0]?.type === 'Literal'
        )
          check(node, node.arguments[0].value, false);
      },
    };
  },
};

export default { rules: { layers: layerRule } };
