/**
 * REDIS_CLUSTER=1 on 3 masters with a replica each: the master of a topic's
 * slot is SIGKILLed while a client publishes to it with
 * WS_REDIS_ACK_REPLICAS=1. Its replica takes over; publishes to that slot
 * are unavailable until the old master is back as the new one's replica (no
 * replica to confirm them); the nodes' subscriptions of that slot move to it
 * (a subscriber on the other node keeps receiving), every acknowledged
 * event is in the new master's history and was delivered once, and no shard
 * restarts.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisCluster, type RedisServer, startRedisCluster } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, keyedPublisher, metricValue, startGateway } from './harness.ts';

let cluster: RedisCluster;
let a: Gateway;
let b: Gateway;
const TOPIC = 'cf:dur';

before(async () => {
  cluster = await startRedisCluster({ replicas: 1 });
  const env = { REDIS_URL: cluster.url, REDIS_CLUSTER: '1', WS_REDIS_ACK_REPLICAS: '1', WS_REDIS_ACK_TIMEOUT_MS: '500', WS_MAX_MESSAGES: '1000' };
  a = await startGateway(env);
  b = await startGateway(env);
  for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200, 10_000);
});
after(async () => {
  await a?.stop();
  await b?.stop();
  await cluster?.stop();
});

/** The master serving the slot of `key` now (CLUSTER KEYSLOT, then the masters' slot ranges in CLUSTER NODES). */
async function masterOf(key: string): Promise<RedisServer> {
  const any = (await cluster.masters())[0]!;
  const slot = Number((await any.cli('CLUSTER', 'KEYSLOT', key)).trim());
  for (const line of (await any.cli('CLUSTER', 'NODES')).trim().split('\n')) {
    const f = line.split(' ');
    if (!f[2]!.includes('master') || f[2]!.includes('fail')) continue;
    const serves = f.slice(8).some((r) => {
      const [lo, hi] = r.split('-').map(Number);
      return slot >= lo! && slot <= (hi ?? lo)!;
    });
    if (serves) return cluster.nodes.find((n) => f[1]!.startsWith(`127.0.0.1:${n.port}@`))!;
  }
  throw new Error(`no master serves slot ${slot}`);
}

test('the master of a topic\'s slot killed under publishing: subscriptions move to its replica, nothing acked lost, delivered once', async (t) => {
  const sub = await Client.connect(b.url());
  assert.equal((await sub.request({ type: 'join', topic: TOPIC })).status, 'ok');
  const pub = await Client.connect(a.url());
  const pub2 = await Client.connect(a.url());
  // A client as the SDK is: every publish has a key, and `unavailable` is resent with the same key.
  const publisher = keyedPublisher(pub, TOPIC);
  const acked = publisher.acked;
  await eventually(() => acked.length >= 30);
  await eventually(() => sub.frames.some((f) => f.type === 'event' && f.id === acked[29]));

  const victim = await masterOf(`sluice:h:{default/${TOPIC}}`);
  const replicas = await cluster.replicasOf(victim);
  assert.equal(replicas.length, 1);
  await victim.stop();
  const promoted = await cluster.waitFailover(victim.port, 30_000);
  assert.equal(promoted.port, replicas[0]!.port);
  // Events published now reach B only through the promoted replica: its subscription moved there (the old master is
  // still down; ephemeral events wait for no replica).
  let k = 0;
  await eventually(async () => {
    assert.equal((await pub2.request({ type: 'publish', topic: TOPIC, data: `gap-${k++}`, ephemeral: true })).status, 'ok');
    return sub.frames.some((f) => f.type === 'event' && typeof f.data === 'string' && f.data.startsWith('gap-'));
  }, 10_000);
  // The promoted replica has no replica of its own: with WS_REDIS_ACK_REPLICAS=1 nothing on its slots is acked (documented)
  // until the old master is back as its replica.
  const gap = acked.length;
  await new Promise((r) => setTimeout(r, 1500));
  assert.ok(acked.length <= gap + 1, 'no ack without a replica to confirm it (one may have been confirmed before the kill)');
  await victim.start();
  await eventually(async () => /role:slave/.test(await victim.cli('INFO', 'replication')), 20_000);
  const before = acked.length;
  await eventually(() => acked.length >= before + 30, 20_000);
  await publisher.stop();
  t.diagnostic(`${acked.length} acked, ${publisher.unavailable()} answers unavailable (resent with their key) around the failover`);

  const reader = await Client.connect(a.url());
  assert.equal((await reader.request({ type: 'join', topic: TOPIC, since: '0-0' })).status, 'ok');
  const stored = reader.takeEvents(TOPIC).map((e) => e.id as string);
  assert.equal(new Set(stored).size, stored.length);
  const missing = acked.filter((id) => !stored.includes(id));
  assert.deepEqual(missing, [], `${missing.length} of ${acked.length} acked events lost in the failover`);
  // The subscriber on B: its shard's subscription followed the slot to the promoted replica.
  const last = acked.at(-1)!;
  await eventually(() => sub.frames.some((f) => f.type === 'event' && f.id === last), 10_000);
  const got = sub.takeEvents(TOPIC).filter((e) => e.id !== undefined).map((e) => e.id as string);
  assert.equal(new Set(got).size, got.length, 'no duplicate delivery');
  for (const id of acked) assert.ok(got.includes(id), `acked ${id} not delivered`);
  assert.match(await promoted.cli('CLIENT', 'LIST'), /name=sluice-shard\d-subscriber/);
  for (const gw of [a, b]) {
    assert.equal(await metricValue(gw, 'sluice_shard_restarts_total'), 0);
    assert.deepEqual(gw.logs.filter((l) => l.level === 'error' || l.level === 'fatal'), []);
  }
  for (const c of [sub, pub, pub2, reader]) c.close();
});
