/**
 * The metrics issue 9 added, read from a real gateway's /metrics: the
 * publish-to-ack and delivery-lag histograms (exact counts), the per-thread
 * gauges, the drain gauges, and (cluster mode) Redis command latency by
 * operation.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, clientsOnShards, eventually, type Gateway, metricTypes, metricValue, parseMetrics, seriesValue, startGateway } from './harness.ts';

test('process metrics: open fds counted (read off the event loop), no main-thread-only event-loop lag; concurrent scrapes all valid', async () => {
  const gw = await startGateway();
  // Read every 5 s (and at start): let one refresh pass with the node up, then 30 sockets more show within the next.
  await new Promise((r) => setTimeout(r, 5200));
  const before = await metricValue(gw, 'process_open_fds');
  assert.ok(before > 0);
  const clients = await Promise.all(Array.from({ length: 30 }, () => Client.connect(gw.url())));
  await eventually(async () => (await metricValue(gw, 'process_open_fds')) >= before + 30, 8000);
  const texts = await Promise.all(Array.from({ length: 5 }, async () => {
    const res = await fetch(gw.admin('/metrics'));
    assert.equal(res.status, 200);
    return res.text();
  }));
  for (const text of texts) {
    const samples = parseMetrics(text);
    assert.ok(!samples.some((s) => s.name.startsWith('nodejs_eventloop_lag')));
    assert.deepEqual(samples.filter((s) => Number.isNaN(s.value)), []);
    assert.ok(seriesValue(samples, 'process_resident_memory_bytes') >= 0);
    assert.equal(seriesValue(samples, 'sluice_connected_sockets'), 30);
  }
  for (const c of clients) c.close();
  assert.equal(await gw.stop(), 0);
});

describe('histograms and per-thread gauges (embedded, two shards)', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_MAX_MESSAGES: '1000' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('every ok ack is one publish-to-ack observation of its class; every fan-out on a shard one delivery-lag observation', async () => {
    const [pub, sub] = await clientsOnShards(gw.url(), [0, 1]);
    assert.equal((await sub!.request({ type: 'join', topic: 'm:1' })).status, 'ok');
    const count = (name: string, cls: string) => metricValue(gw, `${name}_count`, `{class="${cls}"}`);
    const ackBefore = await Promise.all(['durable', 'keyed', 'ephemeral'].map((c) => count('sluice_publish_ack_seconds', c)));
    const lagBefore = await Promise.all(['durable', 'keyed', 'ephemeral'].map((c) => count('sluice_delivery_lag_seconds', c)));
    for (let i = 0; i < 30; i++) assert.equal((await pub!.request({ type: 'publish', topic: 'm:1', data: i })).status, 'ok');
    for (let i = 0; i < 5; i++) assert.equal((await pub!.request({ type: 'publish', topic: 'm:1', data: i, key: 'k' })).status, 'ok');
    for (let i = 0; i < 7; i++) assert.equal((await pub!.request({ type: 'publish', topic: 'm:1', data: i, ephemeral: true })).status, 'ok');
    // A rejected publish is not an ack.
    assert.equal((await pub!.request({ type: 'publish', topic: 'bad topic', data: 1 })).status, 'error');
    await eventually(() => sub!.frames.filter((f) => f.type === 'event').length === 42);
    const ack = await Promise.all(['durable', 'keyed', 'ephemeral'].map((c) => count('sluice_publish_ack_seconds', c)));
    const lag = await Promise.all(['durable', 'keyed', 'ephemeral'].map((c) => count('sluice_delivery_lag_seconds', c)));
    assert.deepEqual(ack.map((v, i) => v - ackBefore[i]!), [30, 5, 7]);
    // One subscribed shard: one fan-out per event.
    assert.deepEqual(lag.map((v, i) => v - lagBefore[i]!), [30, 5, 7]);
    // Loopback, idle machine or not: no ack takes 10 s, so every observation is inside a finite bucket.
    assert.equal(await metricValue(gw, 'sluice_publish_ack_seconds_bucket', '{class="durable",le="10"}'),
      await metricValue(gw, 'sluice_publish_ack_seconds_count', '{class="durable"}'));
    assert.equal(metricTypes(await gw.metrics()).get('sluice_delivery_lag_seconds'), 'histogram');
    for (const c of [pub!, sub!]) c.close();
  });

  test('event-loop lag and heap are reported per thread, labelled coordinator, shard0, shard1', async () => {
    const samples = parseMetrics(await gw.metrics());
    for (const name of ['sluice_eventloop_lag_seconds', 'sluice_eventloop_lag_max_seconds', 'sluice_heap_used_bytes', 'sluice_heap_total_bytes']) {
      const threads = samples.filter((s) => s.name === name).map((s) => s.labels['thread']);
      assert.deepEqual(threads.sort(), ['coordinator', 'shard0', 'shard1'], name);
    }
    for (const thread of ['coordinator', 'shard0', 'shard1']) {
      const used = await metricValue(gw, 'sluice_heap_used_bytes', `{thread="${thread}"}`);
      const total = await metricValue(gw, 'sluice_heap_total_bytes', `{thread="${thread}"}`);
      assert.ok(used > 1e6 && used <= total, `${thread}: ${used} of ${total}`);
      assert.ok((await metricValue(gw, 'sluice_eventloop_lag_seconds', `{thread="${thread}"}`)) >= 0);
    }
    // No histogram or gauge takes a label from a client: the only label values are the fixed sets
    // (and the build's, fixed at start: sluice_build_info).
    for (const s of samples) {
      if (!s.name.startsWith('sluice_') || s.name === 'sluice_build_info') continue;
      for (const [k, v] of Object.entries(s.labels)) {
        assert.ok(['class', 'le', 'thread', 'reason', 'outcome', 'store', 'level', 'op', 'action', 'state'].includes(k), `label ${k}=${v} in ${s.name}`);
        if (k === 'action') assert.ok(['revoke', 'disconnect', 'subscribe', 'unsubscribe'].includes(v), `action=${v} in ${s.name}`);
        if (k === 'state') assert.ok(['online', 'offline'].includes(v), `state=${v} in ${s.name}`);
      }
    }
  });
});

test('drain gauges: elapsed since the drain began against what the configuration implies (delay + sockets / rate)', async () => {
  const gw = await startGateway({ WS_DRAIN_DELAY_MS: '3000', WS_DRAIN_RATE: '500', WS_DRAIN_MAX_MS: '20000' });
  const clients = await Promise.all(Array.from({ length: 10 }, () => Client.connect(gw.url())));
  assert.equal(await metricValue(gw, 'sluice_drain_expected_seconds'), 0);
  assert.equal(await metricValue(gw, 'sluice_drain_elapsed_seconds'), 0);
  assert.equal(await metricValue(gw, 'sluice_drain_max_seconds'), 20);
  assert.equal((await gw.adminFetch('/admin/drain', { method: 'POST' })).status, 202);
  await eventually(async () => (await metricValue(gw, 'sluice_draining')) === 1);
  assert.equal(await metricValue(gw, 'sluice_drain_expected_seconds'), 3 + 10 / 500);
  await eventually(async () => (await metricValue(gw, 'sluice_drain_elapsed_seconds')) > 0.1);
  assert.ok((await metricValue(gw, 'sluice_drain_elapsed_seconds')) < 20);
  for (const c of clients) await c.closedBy(10_000);
  assert.equal(await gw.stop(), 0);
});

describe('Redis command latency (cluster mode)', () => {
  let redis: RedisServer;
  let gw: Gateway;
  before(async () => {
    redis = await startRedis();
    gw = await startGateway({ REDIS_URL: redis.url });
    await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await redis.stop();
  });

  test('every durable publish, history read, subscribe, position read and window settle is one observation of its op', async () => {
    const op = (name: string) => metricValue(gw, 'sluice_redis_command_seconds_count', `{op="${name}"}`).catch(() => 0);
    const before = { publish: await op('publish'), history: await op('history'), subscribe: await op('subscribe'), position: await op('position'), window: await op('window') };
    const c = await Client.connect(gw.url());
    const first = await c.request({ type: 'publish', topic: 'r:1', data: 0 });
    for (let i = 1; i < 10; i++) assert.equal((await c.request({ type: 'publish', topic: 'r:1', data: i })).status, 'ok');
    assert.equal((await c.request({ type: 'join', topic: 'r:1', since: (first.data as { id: string }).id })).status, 'ok');
    await eventually(async () => (await op('publish')) - before.publish === 10);
    assert.equal((await op('history')) - before.history, 1);
    assert.equal((await op('subscribe')) - before.subscribe, 1);
    // The topic's position is read once its SUBSCRIBE is confirmed.
    assert.equal((await op('position')) - before.position, 1);
    // The upgrade's IP window (and the tenant window's settles) went to Redis.
    assert.ok((await op('window')) - before.window >= 1);
    c.close();
  });
});

test('a shard crash does not make the node\'s counters fall (a restarted shard counts from 0; its predecessor\'s last counts are kept)', async () => {
  const gw = await startGateway({ SLUICE_TEST_HOOKS: '1', WS_MAX_MESSAGES: '1000' });
  const [a, b] = await clientsOnShards(gw.url(), [0, 1]);
  for (let i = 0; i < 25; i++) await a!.request({ type: 'ping' });
  for (let i = 0; i < 5; i++) await b!.request({ type: 'ping' });
  assert.equal((await a!.request({ type: 'publish', topic: 'c:1', data: 1 })).status, 'ok');
  const framesBefore = await metricValue(gw, 'sluice_frames_in_total');
  const acksBefore = await metricValue(gw, 'sluice_publish_ack_seconds_count', '{class="durable"}');
  assert.ok(framesBefore >= 31);
  a!.send({ type: 'debug.crash' });
  await eventually(async () => (await metricValue(gw, 'sluice_shard_restarts_total')) === 1, 10_000);
  await a!.closedBy(10_000);
  // Scraped after the restart: every counter at least what it was.
  assert.ok((await metricValue(gw, 'sluice_frames_in_total')) >= framesBefore, 'frames_in fell after the crash');
  assert.ok((await metricValue(gw, 'sluice_publish_ack_seconds_count', '{class="durable"}')) >= acksBefore, 'the histogram fell');
  // Gauges are not carried over: the crashed shard's socket is gone.
  await eventually(async () => (await metricValue(gw, 'sluice_connected_sockets')) === 1);
  b!.close();
  assert.equal(await gw.stop(), 0);
});
