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
    // Migrations are frozen once landed (never edited), so style rules do not reach into them.
    files: ['db/migrations/**'],
    rules: {
      '@typescript-eslint/consistent-type-imports': 'off',
      '@typescript-eslint/no-import-type-side-effects': 'off',
    },
  },
);
