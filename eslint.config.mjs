import tseslint from 'typescript-eslint';
import layers from './lint/layers.mjs';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.yoke/**', 'test-artifacts/**', 'coverage/**', '**/*.js', '**/*.mjs'] },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.base],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { yoke: layers },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A promise nobody awaits loses its failure: in an activity that is a silent retry, in the CLI an exit 0.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-import-type-side-effects': 'error',
      'yoke/layers': 'error',
    },
  },
  {
    // Every statement lives in db/: repository functions taking the executor (db or transaction)
    // first. Activities compose them, so a statement is written, typed and reviewed in one place.
    files: ['activities/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: 'kysely',
              importNames: ['sql'],
              message: 'SQL belongs in db/: add a repository function there and call it',
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector:
            'CallExpression[callee.property.name=/^(selectFrom|selectNoFrom|insertInto|updateTable|deleteFrom|replaceInto|mergeInto)$/]',
          message: 'statements belong in db/: add a repository function there and call it',
        },
      ],
    },
  },
  {
    // Migrations are frozen once landed (never edited), so style rules do not reach into them.
    files: ['db/migrations/**'],
    rules: {
      '@typescript-eslint/consistent-type-imports': 'off',
      '@typescript-eslint/no-import-type-side-effects': 'off',
    },
  },
);
