// `pnpm build` for the gateway: dist/main.js (the coordinator, also the
// `sluice` bin) and dist/shard.js (what each shard thread runs), as ES
// modules with source maps, plain JavaScript: no tsx, no TypeScript at run
// time. The workspace's own packages (@sluice/core, protocol, redis,
// telemetry, uws) are bundled in, because they are not published; every
// npm dependency stays an import, resolved from node_modules at run time,
// and must be listed in this package's `dependencies` (checked below, so a
// tarball install cannot miss one). Declarations (dist/*.d.ts) come from tsc.
import { build } from 'esbuild';
import { copyFileSync, cpSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'));
const external = Object.keys(pkg.dependencies);
rmSync(new URL('./dist', import.meta.url), { recursive: true, force: true });
const result = await build({
  absWorkingDir: new URL('.', import.meta.url).pathname,
  entryPoints: { main: 'src/main.ts', shard: 'src/shard/index.ts' },
  outdir: 'dist',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20.19',
  sourcemap: true,
  // Source maps carry the TypeScript, so a stack from the tarball maps to code one can read.
  sourcesContent: true,
  external,
  metafile: true,
  logLevel: 'warning',
});
// Every import left in the bundle is a Node built-in or a declared dependency.
const builtins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
const undeclared = new Set();
for (const out of Object.values(result.metafile.outputs)) {
  for (const imp of out.imports) {
    if (!imp.external || builtins.has(imp.path)) continue;
    const name = imp.path.startsWith('@') ? imp.path.split('/').slice(0, 2).join('/') : imp.path.split('/')[0];
    if (!external.includes(name)) undeclared.add(imp.path);
  }
}
if (undeclared.size > 0) {
  process.stderr.write(`apps/gateway/build.mjs: the bundle imports ${[...undeclared].join(', ')}, not in dependencies\n`);
  process.exit(1);
}
// The cork probe runs as a file of its own, next to the module that starts it.
const require = createRequire(import.meta.url);
copyFileSync(new URL('./cork-probe.mjs', `file://${require.resolve('@sluice/uws')}`), new URL('./dist/cork-probe.mjs', import.meta.url));
// The admin page (GET /ui): apps/admin-ui's build (turbo builds it first: a devDependency), copied whole.
const ui = new URL('../admin-ui/dist/', import.meta.url);
if (!existsSync(new URL('index.html', ui))) {
  process.stderr.write('apps/gateway/build.mjs: apps/admin-ui/dist/index.html is missing: build @sluice/admin-ui first (pnpm build does)\n');
  process.exit(1);
}
cpSync(ui, new URL('./dist/ui/', import.meta.url), { recursive: true });
