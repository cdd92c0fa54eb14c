/**
 * The production run: `node apps/gateway/dist/main.js`, the build of
 * build.mjs (rebuilt here from the current sources), with no tsx and no
 * TypeScript in any thread, talked to over real sockets.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { type Client, clientsOnShards, type Gateway, metricValue, running, startGateway } from './harness.ts';

const GATEWAY_DIR = fileURLToPath(new URL('..', import.meta.url));
let gw: Gateway;

before(async () => {
  await promisify(execFile)(process.execPath, ['build.mjs'], { cwd: GATEWAY_DIR, timeout: 60_000 });
  gw = await startGateway({}, { built: true });
});

after(async () => {
  await Promise.all([...running].map((g) => g.stop()));
});

/** Every child process of `pid`, over all its threads. */
function childrenOf(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
    readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter((s) => s !== '').map(Number));
}

test('the built gateway runs as plain `node dist/main.js`: no loader on its command line, no esbuild service (tsx would start one)', () => {
  const pid = gw.proc.pid!;
  const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((s) => s !== '');
  assert.deepEqual(argv.slice(1), ['dist/main.js']);
  assert.deepEqual(childrenOf(pid), [], 'no child process once started (the cork probe has exited)');
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
  assert.doesNotMatch(maps, /esbuild/);
  // Its threads: the coordinator and two shards, each with its uWS app.
  assert.match(maps, /uws_linux_x64_\d+\.node/);
});

test('both shard threads of the built gateway serve: welcome, join, publish, event, across shards', async () => {
  const [a, b] = await clientsOnShards(gw.url(), [0, 1]) as [Client, Client];
  await a.request({ type: 'join', topic: 'built:t' });
  await b.request({ type: 'join', topic: 'built:t' });
  const reply = await b.request({ type: 'publish', topic: 'built:t', data: { n: 1 } });
  assert.equal(reply['status'], 'ok');
  for (const c of [a, b]) {
    const ev = await c.next((f) => f.type === 'event');
    assert.deepEqual(ev['data'], { n: 1 });
  }
  assert.equal(await metricValue(gw, 'sluice_connected_sockets'), 2);
  a.close();
  b.close();
});

test('the built gateway drains on SIGTERM and exits 0', async () => {
  assert.equal(await gw.stop('SIGTERM'), 0, gw.stderr());
  assert.doesNotMatch(gw.stderr(), /Aborted|Segmentation|uv loop/);
});
