/**
 * The test kit's choice between the build and the sources (startGateway
 * without `built`): the build only when it is newer than every file it
 * bundles, so that an edit not built yet is what the tests run.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildIsFresh, bundledFolders, gatewayChoice } from '../src/testing/index.ts';

const FOLDERS = ['apps/gateway', 'apps/admin-ui', 'packages/core', 'packages/protocol', 'packages/redis', 'packages/telemetry', 'packages/uws'];

/** A file at `path` under `root` whose modification time is `at` (seconds). */
function file(root: string, path: string, at: number, text = ''): void {
  const p = join(root, path);
  mkdirSync(join(p, '..'), { recursive: true });
  writeFileSync(p, text);
  utimesSync(p, at, at);
}

/** A workspace like this one: the gateway depends on the bundled folders' packages (one as a devDependency), not on push-worker's. */
function workspace(repo: string): void {
  const name = (f: string): string => `@sluice/${f.split('/')[1]!}`;
  const deps = FOLDERS.slice(2).map((f) => [name(f), 'workspace:*']);
  file(repo, 'apps/gateway/package.json', 1000, JSON.stringify({
    name: '@sluice/gateway', dependencies: { ...Object.fromEntries(deps), pino: '9.0.0' }, devDependencies: { '@sluice/admin-ui': 'workspace:*' },
  }));
  for (const f of [...FOLDERS.slice(1), 'apps/push-worker']) file(repo, `${f}/package.json`, 1000, JSON.stringify({ name: name(f) }));
}

test('the build runs when dist/main.js is newer than every bundled source; an edit to any of them, and no build, mean the sources', (t) => {
  const repo = mkdtempSync(join(tmpdir(), 'sluice-kit-'));
  t.after(() => rmSync(repo, { recursive: true, force: true }));
  workspace(repo);
  for (const f of FOLDERS) file(repo, `${f}/src/index.ts`, 1000);
  assert.deepEqual(bundledFolders(repo).sort(), [...FOLDERS].sort(), 'the gateway and the workspace packages it depends on');
  assert.equal(buildIsFresh(repo), false, 'no build');
  file(repo, 'apps/gateway/dist/main.js', 2000);
  assert.equal(buildIsFresh(repo), true);
  // Newer files that are not in the bundle leave it fresh.
  for (const p of ['apps/gateway/test/x.test.ts', 'apps/gateway/src/testing/gateway.ts', 'packages/core/node_modules/a/index.js',
    'packages/core/dist/index.js', 'packages/redis/.turbo/log', 'apps/push-worker/src/main.ts']) file(repo, p, 3000);
  assert.equal(buildIsFresh(repo), true);
  // Each bundled folder, at any depth, makes it stale.
  for (const p of ['packages/protocol/src/deep/frames.ts', 'apps/admin-ui/index.html', 'apps/gateway/build.mjs', 'apps/gateway/src/shard/session.ts']) {
    file(repo, p, 3000);
    assert.equal(buildIsFresh(repo), false, p);
    file(repo, p, 1000);
    assert.equal(buildIsFresh(repo), true, `${p} back to its old time`);
  }
});

test('SLUICE_TEST_GATEWAY is built, source or unset; another value is an error naming it', () => {
  assert.equal(gatewayChoice(undefined), 'auto');
  assert.equal(gatewayChoice(''), 'auto');
  assert.equal(gatewayChoice('built'), 'built');
  assert.equal(gatewayChoice('source'), 'source');
  assert.throws(() => gatewayChoice('dist'), /SLUICE_TEST_GATEWAY=dist: must be built or source/);
});
