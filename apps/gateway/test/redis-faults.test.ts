/**
 * Redis stops and starts again under a publishing load: the node degrades as
 * documented and resumes without a restart, and nothing acked is lost.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, clientsOnShards, eventually, type Frame, type Gateway, metricValue, startGateway } from './harness.ts';

let redis: RedisServer;
let gw: Gateway;
before(async () => {
  redis = await startRedis({ persist: true });
  gw = await startGateway({ REDIS_URL: redis.url, WS_MAX_MESSAGES: '1000' });
  await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
});
after(async () => {
  await redis.stop();
});

const ready = async (): Promise<number> => (await fetch(gw.admin('/health/ready'))).status;

test('Redis down: readiness 503, durable publishes unavailable, ephemeral still flows in the node; back: everything resumes, every acked event delivered once', async () => {
  const [sub0, sub1] = await clientsOnShards(gw.url(), [0, 1]);
  for (const c of [sub0!, sub1!]) {
    assert.equal((await c.request({ type: 'join', topic: 'f:dur' })).status, 'ok');
    assert.equal((await c.request({ type: 'join', topic: 'f:eph' })).status, 'ok');
  }
  const pub = await Client.connect(gw.url());
  const acked: string[] = [];
  let unavailable = 0;
  let n = 0;
  let running = true;
  // A publisher that never stops trying, as a well-behaved client would (with a pause after `unavailable`).
  const load = (async () => {
    while (running) {
      const r: Frame = await pub.request({ type: 'publish', topic: 'f:dur', data: n++ });
      if (r.status === 'ok') acked.push((r.data as { id: string }).id);
      else {
        assert.equal(r.reason, 'unavailable');
        unavailable++;
        await new Promise((res) => setTimeout(res, 20));
      }
    }
  })();
  await eventually(() => acked.length >= 20);

  await redis.stop();
  await eventually(async () => (await ready()) === 503);
  await eventually(() => unavailable > 0);
  const ackedBefore = acked.length;
  // Ephemeral events still reach both shards of this node.
  const eph = await pub.request({ type: 'publish', topic: 'f:eph', data: 'during-outage', ephemeral: true });
  assert.equal(eph.status, 'ok');
  for (const c of [sub0!, sub1!]) await c.next((f) => f.type === 'event' && f.data === 'during-outage');
  // A join still works (this node's events only), a resume with since cannot.
  const joiner = await Client.connect(gw.url());
  assert.equal((await joiner.request({ type: 'join', topic: 'f:late' })).status, 'ok');
  assert.equal((await joiner.request({ type: 'join', topic: 'f:dur', since: acked[0]! })).reason, 'unavailable');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(acked.length, ackedBefore, 'nothing is acked while Redis is down');

  await redis.start();
  await eventually(async () => (await ready()) === 200, 10_000);
  await eventually(() => acked.length >= ackedBefore + 20, 10_000);
  running = false;
  await load;

  // Every acked event is in history, in order...
  const reader = await Client.connect(gw.url());
  const r = await reader.request({ type: 'join', topic: 'f:dur', since: '0-0' });
  assert.equal(r.status, 'ok');
  const stored = reader.takeEvents('f:dur').map((e) => e.id as string);
  for (const id of acked) assert.ok(stored.includes(id), `acked ${id} missing from history`);
  // ...and both subscribers, which stayed connected through the outage, got each of them exactly once.
  const last = acked.at(-1)!;
  for (const c of [sub0!, sub1!]) {
    await eventually(() => c.frames.some((f) => f.type === 'event' && f.id === last), 5000);
    const ids = c.takeEvents('f:dur').map((e) => e.id as string);
    assert.equal(new Set(ids).size, ids.length, 'no duplicate delivery');
    for (const id of acked) assert.ok(ids.includes(id), `acked ${id} not delivered`);
  }
  // The state change is logged once, as a warning; nothing at error level; no shard restarted.
  assert.equal(gw.logs.filter((l) => String(l.msg).startsWith('redis unreachable')).length, 1);
  assert.ok(gw.logs.some((l) => l.msg === 'redis reachable again'));
  assert.deepEqual(gw.logs.filter((l) => l.level === 'error' || l.level === 'fatal'), []);
  assert.equal(await metricValue(gw, 'sluice_shard_restarts_total'), 0);
  assert.equal(await metricValue(gw, 'sluice_redis_outages_total'), 1);
  assert.ok((await metricValue(gw, 'sluice_redis_errors_total')) >= 0);
  for (const c of [sub0!, sub1!, pub, joiner, reader]) c.close();
  assert.equal(await gw.stop(), 0);
  assert.ok(!gw.stderr().includes('Unhandled'), gw.stderr());
});

test('cluster mode: while a crashed shard restarts, joins of the topics its mesh owned still work through Redis', async () => {
  const { ownerOf, topicKey } = await import('@sluice/core');
  const node = await startGateway({ REDIS_URL: redis.url, SLUICE_TEST_HOOKS: '1' });
  await eventually(async () => (await fetch(node.admin('/health/ready'))).status === 200);
  const [a, b] = await clientsOnShards(node.url(), [0, 1]);
  const owned = (): string => {
    for (let i = 0; ; i++) if (ownerOf(topicKey('default', `crashed:${i}`), 2) === 0) return `crashed:${i}`;
  };
  const topic = owned();
  // a's join makes the topic shard 0's in the node's mesh (its first toucher).
  assert.equal((await a!.request({ type: 'join', topic })).status, 'ok');
  a!.send({ type: 'debug.crash' });
  await a!.closedBy();
  // Shard 0 is down (restarting after 250 ms): its mesh topics have no owner now.
  const joined = await b!.request({ type: 'join', topic });
  assert.equal(joined.status, 'ok', JSON.stringify(joined));
  const ack = await b!.request({ type: 'publish', topic, data: 'via redis' });
  assert.equal(ack.status, 'ok');
  assert.equal((await b!.next((f) => f.type === 'event' && f.topic === topic)).data, 'via redis');
  const admin = await node.adminPost('/v1/publish', { topic, data: 'admin' });
  assert.equal(admin.status, 200);
  await b!.next((f) => f.type === 'event' && f.data === 'admin');
  b!.close();
  assert.equal(await node.stop(), 0);
});
