/**
 * A partition between one node and Redis: node A runs in a network
 * namespace (benchmarks/chaos/netfault.ts), node B on the host, Redis on the
 * host. A's Redis traffic is dropped (silence, no reset: TCP sees nothing)
 * for a while, then restored. A must notice (readiness 503, durable
 * publishes unavailable, no shard crash), B goes on, and once the link is
 * back A is ready again and its subscriber has every event B acknowledged,
 * once, in order.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
// The namespace kit lives with the chaos harness, which uses it at scale; this test needs one node in one namespace.
import { NetNs } from '../../../benchmarks/chaos/netfault.ts';
import { gatewayArgs } from '../src/testing/index.ts';
import { Client, eventually, type Gateway, metricValue, startGateway } from './harness.ts';

const PARTITION_MS = 8000;
let redis: RedisServer;
let ns: NetNs;
let a: Gateway;
let b: Gateway;
let aUrl: string;
let aAdmin: string;

before(async () => {
  ns = await NetNs.create('part');
  redis = await startRedis();
  // startRedis binds loopback only, which the namespace cannot reach.
  await redis.cli('CONFIG', 'SET', 'bind', `127.0.0.1 ${ns.hostAddr}`);
  a = await startGateway({ HOST: ns.nsAddr, ADMIN_HOST: ns.nsAddr, REDIS_URL: `redis://${ns.hostAddr}:${redis.port}`, WS_MAX_MESSAGES: '1000' },
    { command: ns.command(process.execPath, ...gatewayArgs()), raiseFileLimit: true, timeoutMs: 60_000 });
  aUrl = `ws://${ns.nsAddr}:${a.port}/ws`;
  aAdmin = `http://${ns.nsAddr}:${a.adminPort}`;
  b = await startGateway({ REDIS_URL: redis.url, WS_MAX_MESSAGES: '1000' });
  await eventually(async () => (await readyA()) === 200, 10_000);
});
after(async () => {
  await ns?.restore();
  await a?.stop();
  await b?.stop();
  await redis?.stop();
  await ns?.destroy();
});

async function readyA(): Promise<number> {
  try {
    return (await fetch(`${aAdmin}/health/ready`, { signal: AbortSignal.timeout(3000) })).status;
  } catch {
    return 0;
  }
}

async function metricA(name: string): Promise<number> {
  const text = await (await fetch(`${aAdmin}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line === undefined ? NaN : Number(line.split(' ').at(-1));
}

test('node A cut from Redis: it notices (readiness, unavailable), B goes on, and after the cut A catches up on everything acked', async (t) => {
  const sub = await Client.connect(aUrl);
  assert.equal((await sub.request({ type: 'join', topic: 'pt:dur' })).status, 'ok');
  const pubA = await Client.connect(aUrl);
  const pubB = await Client.connect(b.url());
  const acked: string[] = [];
  const publishB = async (data: unknown): Promise<void> => {
    const r = await pubB.request({ type: 'publish', topic: 'pt:dur', data });
    assert.equal(r.status, 'ok', JSON.stringify(r));
    acked.push((r.data as { id: string }).id);
  };
  await publishB('before');
  await eventually(() => sub.frames.some((f) => f.type === 'event' && f.data === 'before'));

  await ns.dropPort(redis.port);
  const t0 = performance.now();
  // B publishes on through the partition.
  let n = 0;
  let running = true;
  const load = (async () => {
    while (running) {
      await publishB(n++);
      await sleep(50);
    }
  })();
  // A notices: readiness fails, a durable publish answers unavailable.
  await eventually(async () => (await readyA()) === 503, 10_000);
  const noticed = performance.now() - t0;
  const r = await pubA.request({ type: 'publish', topic: 'pt:dur', data: 'from-a' }, 10_000);
  assert.equal(r.reason, 'unavailable', JSON.stringify(r));
  assert.equal((await fetch(`${aAdmin}/health/live`)).status, 200, 'alive all along');
  const left = PARTITION_MS - (performance.now() - t0);
  if (left > 0) await sleep(left);

  await ns.restore();
  const t1 = performance.now();
  await eventually(async () => (await readyA()) === 200, 20_000);
  const back = performance.now() - t1;
  running = false;
  await load;
  await publishB('after');
  t.diagnostic(`A noticed the cut in ${noticed.toFixed(0)} ms, was ready ${back.toFixed(0)} ms after the link came back; ${acked.length} acked on B`);

  // The subscriber on A has every acked event, once, in order.
  await eventually(() => sub.frames.some((f) => f.type === 'event' && f.data === 'after'), 20_000);
  const got = sub.takeEvents('pt:dur').map((e) => e.id as string);
  assert.deepEqual(got, acked, 'every acked event once, in order');
  // And A publishes again: its shards' connections are back too (each on its own reconnect backoff, up to 1 s apart).
  let again: Record<string, unknown> = {};
  await eventually(async () => {
    again = await pubA.request({ type: 'publish', topic: 'pt:dur', data: 'a-again' });
    return again.status === 'ok';
  }, 5000).catch(() => assert.fail(`A's publishes did not recover: ${JSON.stringify(again)}`));
  assert.equal(await metricA('sluice_shard_restarts_total'), 0);
  assert.ok((await metricA('sluice_redis_outages_total')) >= 1, 'the cut counted as an outage');
  assert.deepEqual(a.logs.filter((l) => l.level === 'error' || l.level === 'fatal'), []);
  assert.equal(await metricValue(b, 'sluice_redis_outages_total'), 0, 'B never lost Redis');
  for (const c of [sub, pubA, pubB]) c.close();
});
