#!/usr/bin/env node
// Builds the publishable package into dist/:
//   index.js (+ .map)                    ESM for Node and bundlers, @sluice/protocol bundled in
//   index.d.ts                           the public API's declarations, @sluice/protocol's types inlined
//   sluice-client.browser.min.js (+ .map) one minified ESM file for a <script type="module">
// esbuild writes the JavaScript; rollup with rollup-plugin-dts writes the
// declaration bundle. @sluice/protocol is a workspace package that is never
// published, so nothing in dist may import it.
import { readFileSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { rollup } from 'rollup';
import { dts } from 'rollup-plugin-dts';

const PKG = fileURLToPath(new URL('..', import.meta.url));
const DIST = `${PKG}dist`;
const ENTRY = `${PKG}src/index.ts`;
const { version } = JSON.parse(readFileSync(`${PKG}package.json`, 'utf8'));
const banner = { js: `/* @sluice/client ${version} | Apache-2.0 */` };

rmSync(DIST, { recursive: true, force: true });

const common = {
  entryPoints: [ENTRY],
  bundle: true,
  format: 'esm',
  sourcemap: true,
  // src/ and @sluice/protocol only: any other import is a mistake to see at once.
  external: [],
  legalComments: 'none',
  banner,
  logLevel: 'warning',
  metafile: true,
  absWorkingDir: PKG,
};

const results = await Promise.all([
  // Node 20+ and bundlers: readable, not minified (a bundler minifies it itself).
  build({ ...common, outfile: `${DIST}/index.js`, platform: 'neutral', target: 'es2022' }),
  // Browsers: one file, minified, for <script type="module"> or import() from a CDN.
  build({
    ...common, outfile: `${DIST}/sluice-client.browser.min.js`, platform: 'browser',
    target: ['chrome120', 'firefox120', 'safari16'], minify: true,
  }),
]);

// Everything in the JavaScript must come from this package's src or @sluice/protocol's.
for (const r of results) {
  for (const input of Object.keys(r.metafile.inputs)) {
    if (!/\/packages\/(client|protocol)\/src\/[^/]+\.ts$/.test(resolve(PKG, input))) {
      throw new Error(`unexpected input in the bundle: ${input}`);
    }
  }
}

// Declarations: rollup-plugin-dts compiles src with TypeScript (declarations
// only) and follows @sluice/protocol, whose export resolves through the
// workspace link to packages/protocol/src; respectExternal makes it inline
// what it resolves instead of leaving every bare import external, and
// `external` keeps everything else (there is nothing else) out.
const bundle = await rollup({
  input: ENTRY,
  external: (id) => !id.startsWith('.') && !id.startsWith('/') && id !== '@sluice/protocol',
  // stripInternal: what is marked @internal (the constructor that takes a test clock) is not API.
  plugins: [dts({ tsconfig: `${PKG}tsconfig.json`, respectExternal: true, compilerOptions: { types: [], stripInternal: true } })],
  onwarn(warning) {
    throw new Error(`rollup: ${warning.message}`);
  },
});
await bundle.write({ file: `${DIST}/index.d.ts`, format: 'es' });
await bundle.close();

const dtsText = readFileSync(`${DIST}/index.d.ts`, 'utf8');
const imports = [...dtsText.matchAll(/\b(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);
if (imports.length > 0) throw new Error(`dist/index.d.ts still imports ${imports.join(', ')}`);
if (/\/\/\/\s*<reference/.test(dtsText)) throw new Error('dist/index.d.ts has a triple-slash reference');

const browser = readFileSync(`${DIST}/sluice-client.browser.min.js`);
const gz = gzipSync(browser, { level: 9 }).length;
console.log(`@sluice/client: dist/index.js, dist/index.d.ts, dist/sluice-client.browser.min.js (${browser.length} B, ${gz} B gzipped)`);
