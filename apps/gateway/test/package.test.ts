/**
 * The gateway as an operator outside the workspace gets it: build.mjs, then
 * `pnpm pack`, then `npm install` of the tarball into an empty project under
 * os.tmpdir() (no workspace node_modules above it), where `npx sluice`
 * starts it and a client talks to it. Nothing but the tarball's declared
 * dependencies is installed there: no tsx, no TypeScript, no workspace
 * package.
 *
 * npm runs with --prefer-offline: after the first run everything comes from
 * its cache. Every step has its own time limit and says which step ran out.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, type Gateway, metricValue, startGateway } from './harness.ts';
import { cleanEnv, emptyProject, npmInstall, step } from './steps.ts';

const GATEWAY_DIR = fileURLToPath(new URL('..', import.meta.url));
const REPO = fileURLToPath(new URL('../../../', import.meta.url));

interface Manifest {
  name: string;
  version: string;
  bin: Record<string, string>;
  files: string[];
  engines: Record<string, string>;
  dependencies: Record<string, string>;
}

let work: string;
let tarball: string;
let manifestText: string;
let manifest: Manifest;
let files: string[];

describe('@sluice/gateway packed and installed outside the workspace', { timeout: 600_000 }, () => {
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'sluice-gateway-pack-'));
    const packDir = join(work, 'pack');
    mkdirSync(packDir);
    await step('build', process.execPath, ['build.mjs'], { cwd: GATEWAY_DIR, timeoutMs: 120_000 });
    await step('pnpm pack', 'pnpm', ['pack', '--pack-destination', packDir], { cwd: GATEWAY_DIR, timeoutMs: 60_000 });
    const tgz = readdirSync(packDir).filter((f) => f.endsWith('.tgz'));
    assert.equal(tgz.length, 1, `pnpm pack wrote ${tgz.join(', ') || 'nothing'}`);
    tarball = join(packDir, tgz[0]!);
    const listing = await step('list', 'tar', ['-tzf', tarball], { cwd: work, timeoutMs: 30_000 });
    files = listing.stdout.trim().split('\n').map((f) => f.replace(/^package\//, ''));
    manifestText = (await step('manifest', 'tar', ['-xzOf', tarball, 'package/package.json'], { cwd: work, timeoutMs: 30_000 })).stdout;
    manifest = JSON.parse(manifestText) as Manifest;
  });
  after(() => {
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  test('the packed manifest: the sluice bin in the tarball, only registry dependencies, no workspace: protocol in them', () => {
    assert.equal(manifest.name, '@sluice/gateway');
    assert.equal(manifest.bin['sluice'], './dist/main.js');
    assert.ok(files.includes('dist/main.js') && files.includes('dist/shard.js') && files.includes('dist/cork-probe.mjs'), files.join(', '));
    assert.deepEqual(files.filter((f) => f.startsWith('src/') || f.startsWith('test/') || f.endsWith('.ts')), []);
    // The admin page's build (GET /ui): its index and its hashed script.
    assert.ok(files.includes('dist/ui/index.html') && files.some((f) => /^dist\/ui\/assets\/index-[\w-]+\.js$/.test(f)), files.join(', '));
    // The license travels with the package, the same text as the repository's.
    assert.ok(files.includes('LICENSE'), 'LICENSE is in the tarball');
    assert.equal(readFileSync(join(GATEWAY_DIR, 'LICENSE'), 'utf8'), readFileSync(join(REPO, 'LICENSE'), 'utf8'));
    const deps = Object.entries(manifest.dependencies);
    assert.deepEqual(deps.filter(([name, spec]) => name.startsWith('@sluice/') || spec.startsWith('workspace:')), []);
    // Both uWS builds, pinned exactly: 20.30 for Node 20, 20.57 for 22 and 24.
    assert.equal(manifest.dependencies['uWebSockets.js'], 'npm:@trufflesuite/uws-js-unofficial@20.30.0-unofficial.0');
    assert.equal(manifest.dependencies['@btc-vision/uwebsockets.js'], '20.57.0');
    for (const [name, spec] of deps) assert.match(spec, /^(npm:\S+@)?\d+\.\d+\.\d+(-[\w.]+)?$/, `${name} is pinned (${spec})`);
    assert.match(manifest.engines['node'] ?? '', /20\.19.*22\.12.*24/);
    assert.match(readFileSync(join(GATEWAY_DIR, 'dist', 'main.js'), 'utf8'), /^#!\/usr\/bin\/env node\n/);
  });

  describe('installed with npm into an empty project, started with npx sluice', () => {
    let project: string;
    let gw: Gateway;

    before(async () => {
      project = join(work, 'ops');
      emptyProject(project, REPO, { name: 'sluice-ops' });
      await npmInstall(project, [tarball]);
      // As an operator's shell runs it: without the npm, pnpm and test-runner variables this test runs under.
      // npx runs the gateway as its grandchild and passes no IPC channel on, so the kit's ready message
      // cannot arrive: here (only here) readiness is read from the `gateway ready` log line.
      gw = await startGateway({}, { command: ['npx', '--no-install', 'sluice'], cwd: project, detached: true, baseEnv: cleanEnv(), readyFrom: 'log' });
    });
    after(async () => {
      if (gw !== undefined && gw.proc.exitCode === null) await gw.stop('SIGKILL');
    });

    test('npm installed the gateway\'s dependencies only: no tsx, no TypeScript, no workspace package', () => {
      const modules = join(project, 'node_modules');
      // (ws is there: the 20.30 package depends on it for the JavaScript fallback that Sluice never loads.)
      for (const absent of ['tsx', 'typescript', 'esbuild', '@sluice/core', '@sluice/protocol', '@sluice/uws']) {
        assert.ok(!existsSync(join(modules, absent)), `${absent} was installed`);
      }
      assert.deepEqual(readdirSync(join(modules, '@sluice')), ['gateway']);
      assert.ok(existsSync(join(modules, '.bin', 'sluice')));
    });

    test('npx sluice serves: the build it loaded, welcome, join, publish, event', async () => {
      const line = gw.logs.find((l) => typeof l['uws'] === 'string');
      assert.equal(line?.['node'], process.version);
      assert.match(String(line?.['binary']), new RegExp(`^${project.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/node_modules/`));
      // The admin page, from the tarball's dist/ui.
      const page = await fetch(gw.admin('/ui'));
      assert.equal(page.status, 200);
      assert.match(await page.text(), /<title>Sluice admin<\/title>/);
      const c = await Client.connect(gw.url());
      await c.request({ type: 'join', topic: 'npx:t' });
      const reply = await c.request({ type: 'publish', topic: 'npx:t', data: 'from npx' });
      assert.equal(reply['status'], 'ok');
      assert.equal((await c.next((f) => f.type === 'event'))['data'], 'from npx');
      assert.equal(await metricValue(gw, 'sluice_connected_sockets'), 1);
      c.close();
    });

    test('SIGTERM to npx alone (not its group): npx exits without passing it on, and the gateway drains and stops anyway', async () => {
      const solo = await startGateway({}, { command: ['npx', '--no-install', 'sluice'], cwd: project, detached: true, baseEnv: cleanEnv(),
        readyFrom: 'log' });
      try {
        const pid = solo.logs.find((l) => l['msg'] === 'gateway ready')?.['pid'] as number;
        assert.ok(pid > 0 && pid !== solo.proc.pid);
        process.kill(solo.proc.pid!, 'SIGTERM');
        const deadline = Date.now() + 15_000;
        while (existsSync(`/proc/${pid}`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        assert.equal(existsSync(`/proc/${pid}`), false, 'the gateway process ended');
        assert.ok(solo.logs.some((l) => l['msg'] === 'the npx that started this gateway is gone: draining as for SIGTERM'));
        assert.ok(solo.logs.some((l) => l['msg'] === 'drain finished'), 'it drained');
        assert.ok(solo.logs.some((l) => l['msg'] === 'stopped'), 'it stopped');
      } finally {
        if (solo.proc.exitCode === null) await solo.stop('SIGKILL');
      }
    });

    test('SIGTERM to npx\'s process group drains the gateway, which stops', async () => {
      // npx runs `sh -c sluice`, which runs node: the gateway is a grandchild, and npm does not pass a signal on to it.
      const pid = gw.logs.find((l) => l['msg'] === 'gateway ready')?.['pid'] as number;
      assert.ok(pid > 0 && pid !== gw.proc.pid);
      await gw.stop('SIGTERM');
      const deadline = Date.now() + 15_000;
      while (existsSync(`/proc/${pid}`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.equal(existsSync(`/proc/${pid}`), false, 'the gateway process ended');
      assert.ok(gw.logs.some((l) => l['msg'] === 'drain finished'), 'it drained');
      assert.ok(gw.logs.some((l) => l['msg'] === 'stopped'), 'it stopped');
      assert.deepEqual(gw.logs.filter((l) => typeof l['level'] === 'number' ? (l['level'] as number) >= 50 : l['level'] === 'error' || l['level'] === 'fatal'), []);
    });
  });
});
