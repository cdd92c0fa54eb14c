/**
 * The build choice, the refusal's message, the binaries' checksums against
 * the table in docs/operations.md, and the cork probe with a real uWS in a
 * real child process (glibc's malloc, then jemalloc preloaded).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findSystemDep, missingSystemDep } from '../../../tools/system-deps.mjs';
import { compareVersions, currentRuntime, glibcVersion, loadUws, NoNativeUwsError, noNativeUwsMessage, packageRoot, probeCorkInPlace, UWS_BUILDS } from '../src/index.ts';

const OPERATIONS = fileURLToPath(new URL('../../../docs/operations.md', import.meta.url));

test('compareVersions compares dotted versions numerically', () => {
  assert.ok(compareVersions('2.36', '2.38') < 0);
  assert.ok(compareVersions('2.41', '2.38') > 0);
  assert.ok(compareVersions('2.100', '2.38') > 0);
  assert.equal(compareVersions('2.38', '2.38.0'), 0);
});

test('the build for this runtime: 20.30 on Node 20, 20.57 on 22 and 24, the binary for this ABI', () => {
  const rt = currentRuntime();
  assert.equal(rt.glibc, glibcVersion());
  const { uws, build } = loadUws();
  assert.equal(build.uws, rt.abi === '115' ? '20.30.0' : '20.57.0');
  assert.equal(build.node, process.version);
  assert.ok(build.path.endsWith(`_${rt.platform}_${rt.arch}_${rt.abi}.node`), build.path);
  assert.match(String(uws.App), /\[native code\]/);
  // Asking for the one the coordinator chose gives the same module.
  assert.equal(loadUws(build.uws).uws, uws);
});

test('20.57 loads only on glibc 2.38 or newer, and says why it does not', () => {
  const rt = currentRuntime();
  const older = rt.glibc !== undefined && compareVersions(rt.glibc, '2.38') < 0;
  if (older) {
    assert.throws(() => loadUws('20.57.0'), (err: unknown) => {
      assert.ok(err instanceof NoNativeUwsError);
      assert.equal(err.attempts.length, 1);
      assert.match(err.attempts[0]!.reason, /GLIBC_2\.38' not found/);
      assert.match(err.message, new RegExp(`with glibc ${rt.glibc!.replace('.', '\\.')}, and Sluice runs on nothing else`));
      return true;
    });
  } else {
    assert.equal(loadUws('20.57.0').build.uws, '20.57.0');
  }
});

test('the refusal names the runtime, each build\'s reason and what would work', () => {
  const [b2030, b2057] = UWS_BUILDS as [typeof UWS_BUILDS[0], typeof UWS_BUILDS[0]];
  const node24OnDebian12 = noNativeUwsMessage({ node: 'v24.22.3', platform: 'linux', arch: 'x64', abi: '137', glibc: '2.36' }, [
    { build: b2030, reason: 'ships no binary for this Node (ABI 137; it has Node 16, 18, 20)' },
    { build: b2057, reason: 'its binary does not load: version `GLIBC_2.38\' not found' },
  ]);
  assert.match(node24OnDebian12, /^no uWebSockets\.js build loads natively on Node v24\.22\.3 \(linux-x64, ABI 137\) with glibc 2\.36/);
  assert.match(node24OnDebian12, /\n {2}- uWS 20\.30\.0 \(@trufflesuite\/uws-js-unofficial@20\.30\.0-unofficial\.0\): ships no binary/);
  assert.match(node24OnDebian12, /\n {2}- uWS 20\.57\.0 \(@btc-vision\/uwebsockets\.js@20\.57\.0\): its binary does not load/);
  assert.match(node24OnDebian12, /With glibc 2\.36, install Node 20 \(20\.19 or newer\), or move to a system with glibc 2\.38 or newer/);
  const node23 = noNativeUwsMessage({ node: 'v23.11.1', platform: 'linux', arch: 'x64', abi: '131', glibc: '2.41' }, []);
  assert.match(node23, /Install Node 20, 22 or 24 \(this is Node v23\.11\.1\)/);
  const musl = noNativeUwsMessage({ node: 'v24.22.3', platform: 'linux', arch: 'x64', abi: '137', glibc: undefined }, []);
  assert.match(musl, /with a C library that is not glibc/);
  assert.doesNotMatch(musl, /install Node 20/);
});

test('every installed binary of both builds has the sha256 that docs/operations.md records', () => {
  const doc = readFileSync(OPERATIONS, 'utf8');
  const rows = [...doc.matchAll(/^\| (20\.\d+\.\d+) `([^`]+\.node)` \| `([0-9a-f]{64})` \|$/gm)].map((m) => ({ uws: m[1]!, file: m[2]!, sum: m[3]! }));
  assert.equal(rows.length, 22, 'every binary of 20.57 and the Linux Node 20 ones of 20.30');
  const { build } = loadUws();
  assert.ok(rows.some((r) => r.uws === build.uws && build.path.endsWith(`/${r.file}`)), `the loaded binary ${build.path} is in the table`);
  for (const r of rows) {
    const spec = UWS_BUILDS.find((b) => b.uws === r.uws)!;
    const file = join(packageRoot(spec), r.file);
    assert.equal(createHash('sha256').update(readFileSync(file)).digest('hex'), r.sum, file);
  }
});

test('the cork probe: in place under glibc\'s malloc, moved (SIGABRT) with jemalloc preloaded', async () => {
  const jemalloc = findSystemDep('libjemalloc.so.2');
  if (jemalloc === undefined) throw missingSystemDep('libjemalloc.so.2');
  const { build } = loadUws();
  const env = { ...process.env };
  delete env['LD_PRELOAD'];
  assert.deepEqual(await probeCorkInPlace(build.path, { env }), { inPlace: true, how: 'exit 0' });
  assert.deepEqual(await probeCorkInPlace(build.path, { env: { ...env, LD_PRELOAD: jemalloc } }), { inPlace: false, how: 'SIGABRT' });
  await assert.rejects(probeCorkInPlace('/nonexistent/uws.node', { env }), /the cork probe ended with exit code 1/);
});
