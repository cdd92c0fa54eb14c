// Writes docs/configuration.md from the config schema (pnpm docs:config).
// With --check it writes nothing and exits 1 when the file is stale, for CI.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderConfigDoc } from '../packages/core/src/index.ts';

const target = fileURLToPath(new URL('../docs/configuration.md', import.meta.url));
const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== '--check');
if (unknown.length > 0) {
  console.error(`gen-config-doc: unknown argument ${unknown.join(' ')}; usage: gen-config-doc.ts [--check]`);
  process.exit(2);
}

const expected = renderConfigDoc();
let current: string | undefined;
try {
  current = readFileSync(target, 'utf8');
} catch (err) {
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
}

if (args.includes('--check')) {
  if (current !== expected) {
    console.error(`docs/configuration.md is ${current === undefined ? 'missing' : 'stale'}: run pnpm docs:config`);
    process.exit(1);
  }
  console.log('docs/configuration.md is up to date');
} else if (current === expected) {
  console.log('docs/configuration.md is up to date');
} else {
  writeFileSync(target, expected);
  console.log('wrote docs/configuration.md');
}
