/**
 * REDIS_SENTINELS: two nodes on a master with two replicas under three
 * Sentinels. The master is SIGKILLed while a client publishes with
 * WS_REDIS_ACK_REPLICAS=1: the nodes follow the Sentinels to the new master
 * without a restart, readiness comes back, every acknowledged event is in
 * the new master's history and reached a subscriber on the other node once,
 * and the old master, started again, serves as a replica.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisSentinel, startRedisSentinel } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, keyedPublisher, metricValue, startGateway } from './harness.ts';

let topo: RedisSentinel;
let a: Gateway;
let b: Gateway;

const ready = async (gw: Gateway): Promise<number> => (await fetch(gw.admin('/health/ready'))).status;

before(async () => {
  topo = await startRedisSentinel({ replicas: 2, sentinels: 3 });
  const env = {
    REDIS_SENTINELS: topo.sentinelsSpec, REDIS_SENTINEL_NAME: topo.name, WS_REDIS_ACK_REPLICAS: '1', WS_REDIS_ACK_TIMEOUT_MS: '500',
    WS_MAX_MESSAGES: '1000',
  };
  a = await startGateway(env);
  b = await startGateway(env);
  for (const gw of [a, b]) await eventually(async () => (await ready(gw)) === 200, 10_000);
});
after(async () => {
  await a?.stop();
  await b?.stop();
  await topo?.stop();
});

test('a Sentinel failover under publishing: no restart, readiness back, every acked event in history and delivered once', async (t) => {
  const first = await topo.master();
  // Connected where the Sentinels said: the master knows both nodes' connections.
  assert.match(await first.cli('CLIENT', 'LIST'), /name=sluice-shard0-command/);
  const sub = await Client.connect(b.url());
  assert.equal((await sub.request({ type: 'join', topic: 'st:dur' })).status, 'ok');
  const pub = await Client.connect(a.url());
  // A client as the SDK is: every publish has a key, and `unavailable` is resent with the same key.
  const publisher = keyedPublisher(pub, 'st:dur');
  const acked = publisher.acked;
  await eventually(() => acked.length >= 30);

  const killed = await topo.killMaster();
  const promoted = await topo.waitFailover(killed.port, 30_000);
  assert.notEqual(promoted.port, killed.port);
  // The nodes find the new master by themselves and publishes are acked again.
  const before = acked.length;
  await eventually(() => acked.length >= before + 30, 20_000);
  for (const gw of [a, b]) await eventually(async () => (await ready(gw)) === 200, 10_000);
  assert.match(await promoted.cli('CLIENT', 'LIST'), /name=sluice-shard0-durable-command/);
  await publisher.stop();
  t.diagnostic(`${acked.length} acked, ${publisher.unavailable()} answers unavailable (resent with their key) around the failover`);

  // Every acked event is on the new master, once.
  const reader = await Client.connect(b.url());
  const r = await reader.request({ type: 'join', topic: 'st:dur', since: '0-0' });
  assert.equal(r.status, 'ok');
  const stored = reader.takeEvents('st:dur').map((e) => e.id as string);
  assert.equal(new Set(stored).size, stored.length);
  const missing = acked.filter((id) => !stored.includes(id));
  assert.deepEqual(missing, [], `${missing.length} of ${acked.length} acked events lost in the failover`);
  // The subscriber on the other node got each once, through the resubscription and catch-up.
  const last = acked.at(-1)!;
  await eventually(() => sub.frames.some((f) => f.type === 'event' && f.id === last), 10_000);
  const got = sub.takeEvents('st:dur').map((e) => e.id as string);
  assert.equal(new Set(got).size, got.length, 'no duplicate delivery');
  for (const id of acked) assert.ok(got.includes(id), `acked ${id} not delivered`);
  for (const gw of [a, b]) {
    assert.equal(await metricValue(gw, 'sluice_shard_restarts_total'), 0);
    assert.deepEqual(gw.logs.filter((l) => l.level === 'error' || l.level === 'fatal'), []);
  }

  // The old master comes back as a replica of the new one (the Sentinels reconfigure it).
  await killed.start();
  await eventually(async () => /role:slave/.test(await killed.cli('INFO', 'replication')), 20_000);
  for (const c of [sub, pub, reader]) c.close();
});
