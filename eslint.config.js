// Lint rules, and the package boundaries that keep the pure layers pure.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const IO_MODULES = [
  'node:*', 'fs', 'fs/*', 'net', 'http', 'https', 'http2', 'dgram', 'tls', 'child_process',
  'worker_threads', 'cluster', 'os', 'dns', 'process',
  'uWebSockets.js', 'ioredis', 'piscina', 'pino', 'prom-client', 'ws',
  '@sluice/gateway', '@sluice/telemetry', '@sluice/redis',
];

const pureBoundary = (pkg) => ({
  files: [`packages/${pkg}/src/**/*.ts`],
  rules: {
    'no-restricted-imports': ['error', {
      patterns: [{
        group: IO_MODULES,
        message: `packages/${pkg} is a pure layer: no I/O, no threads, no sockets, no clocks of its own. ` +
          'Take time and I/O as parameters and let apps/gateway wire the real thing.',
      }],
    }],
    'no-restricted-globals': ['error',
      { name: 'process', message: `packages/${pkg} must not read the process: take values as parameters.` },
      { name: 'setTimeout', message: `packages/${pkg} is pure: timers belong to the caller.` },
      { name: 'setInterval', message: `packages/${pkg} is pure: timers belong to the caller.` },
    ],
  },
});

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/dist/**', 'benchmarks/runs/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: 'module' },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-empty': ['error', { allowEmptyCatch: false }],
      eqeqeq: ['error', 'always'],
    },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly', URL: 'readonly', Buffer: 'readonly', setTimeout: 'readonly' } },
  },
  pureBoundary('protocol'),
  pureBoundary('core'),
  {
    files: ['packages/protocol/src/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{ regex: '^[^.]', message: 'packages/protocol has no dependencies: it is the wire contract alone.' }],
      }],
    },
  },
);
