#!/usr/bin/env node
// The README's test command (placeholder until the bootstrap lands):
// lint and typecheck, then every test file in one node:test run.
import { spawnSync } from 'node:child_process';
const run = (cmd, args) => {
  const r = spawnSync(cmd, args, { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};
run('pnpm', ['exec', 'turbo', 'run', 'lint', 'typecheck']);
run(process.execPath, ['tools/run-tests.mjs', ...process.argv.slice(2)]);
