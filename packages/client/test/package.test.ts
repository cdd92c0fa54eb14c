/**
 * The package as an application outside the workspace gets it: the build
 * (`pnpm --filter @sluice/client build`) and `pnpm pack` into a temp dir, the
 * packed manifest, then `npm install` of the tarball into an empty project
 * under os.tmpdir() (no workspace node_modules above it), where
 *   - a plain Node script imports `@sluice/client` by name and talks to a real gateway,
 *   - `tsc --strict` checks a file of real API calls against the shipped declarations,
 *   - headless Chromium loads the minified browser build from the installed
 *     package and talks to the same gateway with its own WebSocket,
 * and the browser build's gzipped size is held under 15 KB.
 *
 * npm runs with --prefer-offline: after the first run everything comes from
 * its cache (ws@8.23.0, on Node 20, is the only thing fetched). Every step has
 * its own time limit and says which step ran out.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { type Browser, chromium } from 'playwright-core';
import { type Gateway, startGateway } from './helpers.ts';
import { emptyProject, npmInstall, step } from '../../../apps/gateway/test/steps.ts';
import { requireSystemDep } from '../../../tools/system-deps.mjs';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const FIXTURES = fileURLToPath(new URL('./package/', import.meta.url));
const TSC = join(REPO, 'node_modules', 'typescript', 'bin', 'tsc');
const WS_VERSION = '8.23.0';
const MAX_GZIP = 15 * 1024;
/** Node 22 and later have a global WebSocket; on Node 20 the empty project also installs ws. */
const NEEDS_WS = (globalThis as { WebSocket?: unknown }).WebSocket === undefined;

/** Every file below `dir`, relative to it, with forward slashes. */
function listFiles(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    return e.isDirectory() ? listFiles(p, base) : [relative(base, p).split(sep).join('/')];
  });
}

/** Every file path an `exports` value can resolve to, with the conditions that lead there. */
function exportTargets(value: unknown, path = ''): { path: string; target: string }[] {
  if (typeof value === 'string') return [{ path, target: value }];
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([k, v]) => exportTargets(v, path === '' ? k : `${path} > ${k}`));
}

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  exports: Record<string, unknown>;
  main?: string;
  types?: string;
  files?: string[];
  engines?: Record<string, string>;
  license?: string;
  sideEffects?: boolean;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  bundledDependencies?: string[];
}

let work: string;
let tarball: string;
/** The tarball's files, unpacked. */
let unpacked: string;
let manifestText: string;
let manifest: Manifest;

// A test of its own, so that a missing browser is counted as a failure at once, not as a time-out below.
test('Debian\'s chromium is installed', () => {
  requireSystemDep('chromium');
});

describe('@sluice/client packed and installed outside the workspace', { timeout: 600_000 }, () => {
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'sluice-client-pack-'));
    const packDir = join(work, 'pack');
    mkdirSync(packDir);
    await step('build', 'pnpm', ['--filter', '@sluice/client', 'build'], { cwd: REPO, timeoutMs: 120_000 });
    await step('pnpm pack', 'pnpm', ['--filter', '@sluice/client', 'pack', '--pack-destination', packDir], { cwd: REPO, timeoutMs: 60_000 });
    const tgz = readdirSync(packDir).filter((f) => f.endsWith('.tgz'));
    assert.equal(tgz.length, 1, `pnpm pack wrote ${tgz.join(', ') || 'nothing'}`);
    tarball = join(packDir, tgz[0]!);
    unpacked = join(work, 'unpacked');
    mkdirSync(unpacked);
    await step('unpack', 'tar', ['-xzf', tarball, '-C', unpacked], { cwd: work, timeoutMs: 30_000 });
    manifestText = readFileSync(join(unpacked, 'package', 'package.json'), 'utf8');
    manifest = JSON.parse(manifestText) as Manifest;
  });
  after(() => {
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  test('the packed manifest: no workspace: protocol, no dependency, every export a file in the tarball', () => {
    assert.equal(tarball.endsWith(`sluice-client-${manifest.version}.tgz`), true, tarball);
    assert.equal(manifest.name, '@sluice/client');
    assert.doesNotMatch(manifestText, /workspace:/);
    assert.equal(manifest.private, undefined);
    for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies', 'bundledDependencies'] as const) {
      assert.deepEqual(Object.keys(manifest[field] ?? {}), [], `the tarball has ${field}`);
    }
    assert.equal(manifest.license, 'Apache-2.0');
    assert.equal(manifest.sideEffects, false);
    assert.ok(manifest.engines?.node, 'engines.node');
    const files = listFiles(join(unpacked, 'package'));
    // The license travels with the package, the same text as the repository's.
    assert.ok(files.includes('LICENSE'), 'LICENSE is in the tarball');
    assert.equal(readFileSync(join(unpacked, 'package', 'LICENSE'), 'utf8'), readFileSync(join(REPO, 'LICENSE'), 'utf8'));
    const targets = [
      ...exportTargets(manifest.exports).map((t) => ({ ...t, path: `exports ${t.path}` })),
      { path: 'main', target: manifest.main ?? '' },
      { path: 'types', target: manifest.types ?? '' },
    ];
    for (const { path, target } of targets) {
      assert.match(target, /^\.\//, `${path} is a relative path`);
      assert.ok(files.includes(target.slice(2)), `${path} -> ${target} is not in the tarball (${files.join(', ')})`);
    }
    assert.deepEqual(exportTargets(manifest.exports).map((t) => t.target).filter((t) => t.includes('src/')), []);
    // The publishConfig overrides were applied: the workspace's own manifest points at src.
    assert.equal(manifest.types, './dist/index.d.ts');
    assert.deepEqual(manifest.exports['.'], { types: './dist/index.d.ts', default: './dist/index.js' });
    assert.deepEqual(manifest.exports['./browser'], { types: './dist/index.d.ts', default: './dist/sluice-client.browser.min.js' });
    assert.deepEqual(files.filter((f) => f.startsWith('src/') || f.startsWith('test/') || f.startsWith('scripts/')), []);
    for (const f of ['dist/index.js.map', 'dist/sluice-client.browser.min.js.map', 'README.md']) assert.ok(files.includes(f), f);
  });

  test('the shipped JavaScript and declarations import nothing (@sluice/protocol is bundled and inlined)', () => {
    const dist = join(unpacked, 'package', 'dist');
    const dts = readFileSync(join(dist, 'index.d.ts'), 'utf8');
    assert.doesNotMatch(dts, /@sluice\/protocol/);
    assert.doesNotMatch(dts, /\bimport\s*\(|\bfrom\s*['"]|\/\/\/\s*<reference/);
    // Limits is @sluice/protocol's: its declaration is in the bundle.
    assert.match(dts, /interface Limits \{/);
    assert.match(dts, /declare class SluiceClient\b/);
    for (const js of ['index.js', 'sluice-client.browser.min.js']) {
      const code = readFileSync(join(dist, js), 'utf8');
      assert.doesNotMatch(code, /@sluice\/protocol|\brequire\(|\bimport\s*\(|\bfrom\s*["'][^"']+["']|\bimport\s*["']/, js);
      assert.match(code, /sourceMappingURL=\S+\.js\.map/, js);
      const map = JSON.parse(readFileSync(join(dist, `${js}.map`), 'utf8')) as { sources: string[]; sourcesContent?: string[] };
      assert.equal(map.sourcesContent?.length, map.sources.length, `${js}.map carries its sources`);
      assert.ok(map.sources.some((s) => s.endsWith('protocol/src/codec.ts')), `${js} bundles @sluice/protocol: ${map.sources.join(', ')}`);
    }
  });

  describe('installed with npm into an empty project', () => {
    let project: string;
    let installed: string;
    let gw: Gateway;

    before(async () => {
      project = join(work, 'app');
      emptyProject(project, REPO, { name: 'sluice-client-consumer', type: 'module' });
      await npmInstall(project, [tarball, ...(NEEDS_WS ? [`ws@${WS_VERSION}`] : [])], 180_000);
      installed = join(project, 'node_modules', '@sluice', 'client');
      for (const f of ['consumer.mjs', 'consumer-types.ts']) copyFileSync(join(FIXTURES, f), join(project, f));
      gw = await startGateway();
    });
    after(async () => {
      if (gw !== undefined) assert.equal(await gw.stop(), 0, gw.stderr());
    });

    test('npm installed the tarball and nothing else for it', () => {
      const inModules = readdirSync(join(project, 'node_modules')).filter((n) => !n.startsWith('.')).sort();
      assert.deepEqual(inModules, NEEDS_WS ? ['@sluice', 'ws'] : ['@sluice']);
      assert.deepEqual(readdirSync(join(project, 'node_modules', '@sluice')), ['client']);
      assert.equal(readFileSync(join(installed, 'package.json'), 'utf8'), manifestText);
    });

    test('a plain Node script imports @sluice/client by name, connects, subscribes, publishes and receives its own event', async () => {
      const topic = 'pkg:node';
      const { stdout } = await step('node consumer.mjs', process.execPath, ['consumer.mjs', gw.url(), topic], { cwd: project, timeoutMs: 20_000 });
      const lines = stdout.trim().split('\n');
      const r = JSON.parse(lines.at(-1)!) as {
        webSocket: string; sluiceErrorIsError: boolean; connectionId: string; maxFrameBytes: number; joined: unknown;
        published: { id?: string }; event: { topic: string; id?: string; data: unknown }; lastId: string; state: string; errors: string[];
      };
      assert.equal(r.webSocket, NEEDS_WS ? 'ws' : 'global');
      assert.equal(r.sluiceErrorIsError, true);
      assert.match(r.connectionId, /^[0-9a-f]+\.\d+\.\d+\.\d+$/);
      assert.ok(r.maxFrameBytes > 0);
      assert.deepEqual(r.joined, {});
      assert.match(r.published.id ?? '', /^\d+-\d+$/);
      assert.deepEqual(r.event, { topic, id: r.published.id, data: { from: 'node', n: 1, text: 'grüße ✓' } });
      assert.equal(r.lastId, r.published.id);
      assert.equal(r.state, 'closed');
      assert.deepEqual(r.errors, []);
    });

    test('tsc --strict checks real API calls against the installed declarations (NodeNext, no DOM, no Node types)', async () => {
      assert.ok(existsSync(TSC), `the workspace's TypeScript is missing at ${TSC}: run pnpm install`);
      await step('tsc --strict', process.execPath, [TSC, '--strict', '--noEmit', '--module', 'nodenext', '--moduleResolution', 'nodenext',
        '--target', 'es2022', '--lib', 'es2022', '--noUnusedLocals', '--pretty', 'false', 'consumer-types.ts'], { cwd: project, timeoutMs: 60_000 });
      // The check has teeth: the same file against a package without declarations fails.
      const broken = join(project, 'node_modules', '@sluice', 'client', 'dist', 'index.d.ts');
      const saved = readFileSync(broken, 'utf8');
      writeFileSync(broken, saved.replace(/declare class SluiceClient\b/, 'declare class SluiceClientRenamed'));
      try {
        await assert.rejects(
          step('tsc on damaged declarations', process.execPath, [TSC, '--strict', '--noEmit', '--module', 'nodenext', '--moduleResolution', 'nodenext',
            '--target', 'es2022', '--lib', 'es2022', '--pretty', 'false', 'consumer-types.ts'], { cwd: project, timeoutMs: 60_000 }),
          /error TS/,
        );
      } finally {
        writeFileSync(broken, saved);
      }
    });

    test('the browser build: gzipped (level 9) at most 15 KB', (t) => {
      const target = (manifest.exports['./browser'] as { default: string }).default;
      const code = readFileSync(join(installed, target));
      const gz = gzipSync(code, { level: 9 }).length;
      const line = `browser build ${target}: ${code.length} bytes, ${gz} bytes gzipped (${(gz / 1024).toFixed(1)} KiB of ${MAX_GZIP / 1024})`;
      t.diagnostic(line);
      assert.ok(gz <= MAX_GZIP, line);
    });

    describe('the browser build in headless Chromium', () => {
      let browser: Browser | undefined;
      let server: Server | undefined;
      const requests: string[] = [];

      before(async () => {
        const executablePath = requireSystemDep('chromium');
        const target = (manifest.exports['./browser'] as { default: string }).default;
        const file = join(installed, target);
        const page = readFileSync(join(FIXTURES, 'page.html'));
        server = createServer((req, res) => {
          requests.push(`${req.method ?? '?'} ${req.url ?? '?'}`);
          const path = (req.url ?? '/').split('?')[0];
          if (path === '/') {
            res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
            res.end(page);
          } else if (path === '/sluice-client.browser.min.js' || path === '/sluice-client.browser.min.js.map') {
            res.writeHead(200, { 'content-type': path.endsWith('.map') ? 'application/json' : 'text/javascript; charset=utf-8' });
            res.end(readFileSync(path.endsWith('.map') ? `${file}.map` : file));
          } else {
            res.writeHead(404, { 'content-type': 'text/plain' });
            res.end('not found');
          }
        });
        await new Promise<void>((resolve, reject) => {
          server!.once('error', reject);
          server!.listen(0, '127.0.0.1', () => resolve());
        });
        browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--headless=new'], timeout: 30_000 });
      });
      after(async () => {
        await browser?.close();
        server?.closeAllConnections();
        await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())));
      });

      test('a page on 127.0.0.1 imports the installed minified ESM file, connects with the browser\'s WebSocket and receives its event', async () => {
        const { port } = server!.address() as AddressInfo;
        const context = await browser!.newContext();
        try {
          const page = await context.newPage();
          const pageErrors: string[] = [];
          page.on('pageerror', (e) => pageErrors.push(String(e)));
          const topic = 'pkg:browser';
          const res = await page.goto(`http://127.0.0.1:${port}/?url=${encodeURIComponent(gw.url())}&topic=${encodeURIComponent(topic)}`,
            { waitUntil: 'load', timeout: 15_000 });
          assert.equal(res?.status(), 200);
          await page.waitForFunction(() => 'sluiceResult' in globalThis, undefined, { timeout: 15_000 })
            .catch((e: unknown) => assert.fail(`the page gave no result within 15 s (page errors: ${pageErrors.join('; ') || 'none'}): ${String(e)}`));
          const r = await page.evaluate(() => (globalThis as unknown as { sluiceResult: Record<string, unknown> }).sluiceResult) as {
            error?: string; userAgent: string; sluiceErrorIsError: boolean; connectionId: string; published: { id?: string };
            event: unknown; state: string; errors: string[];
          };
          assert.equal(r.error, undefined, r.error);
          assert.match(r.userAgent, /HeadlessChrome\/\d+/);
          assert.equal(r.sluiceErrorIsError, true);
          assert.match(r.connectionId, /^[0-9a-f]+\.\d+\.\d+\.\d+$/);
          assert.match(r.published.id ?? '', /^\d+-\d+$/);
          assert.deepEqual(r.event, { topic, id: r.published.id, data: { from: 'browser', n: 1, text: 'grüße ✓' } });
          assert.equal(r.state, 'closed');
          assert.deepEqual(r.errors, []);
          assert.deepEqual(pageErrors, []);
          assert.ok(requests.includes('GET /sluice-client.browser.min.js'), requests.join(', '));
        } finally {
          await context.close();
        }
      });
    });
  });
});
