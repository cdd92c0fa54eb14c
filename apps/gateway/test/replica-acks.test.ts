/**
 * WS_REDIS_ACK_REPLICAS: a durable publish is acknowledged only once the
 * replicas confirmed it (WAIT). On a real master and replica: an ack means
 * the replica holds the event; a replica that stops replicating turns acks
 * into `unavailable` (the event stored on the master, counted), and the
 * resend with the same idempotency key is answered with the first id once
 * the replica is back, and then the replica holds it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, metricValue, startGateway } from './harness.ts';

let master: RedisServer;
let replica: RedisServer;
let gw: Gateway;

/** The ids of a topic's stream on one server (the default tenant's key). */
async function streamIds(server: RedisServer, topic: string): Promise<string[]> {
  const out = await server.cli('XRANGE', `sluice:h:{default/${topic}}`, '-', '+');
  return out.split('\n').filter((l) => /^\d+-\d+$/.test(l.trim())).map((l) => l.trim());
}

async function follow(): Promise<void> {
  await replica.cli('REPLICAOF', '127.0.0.1', String(master.port));
  await eventually(async () => (await replica.cli('INFO', 'replication')).includes('master_link_status:up'), 10_000);
  // And the master counts it: a replica is online on the master only after its first acknowledgement following the
  // sync (its cron sends one a second); a WAIT before that finds no replica.
  await eventually(async () => /slave0:.*state=online/.test(await master.cli('INFO', 'replication')), 10_000);
}

before(async () => {
  master = await startRedis();
  replica = await startRedis();
  await follow();
  gw = await startGateway({ REDIS_URL: master.url, WS_REDIS_ACK_REPLICAS: '1', WS_REDIS_ACK_TIMEOUT_MS: '300', WS_MAX_MESSAGES: '1000' });
  await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
});
after(async () => {
  await gw?.stop();
  await replica?.stop();
  await master?.stop();
});

test('an ack with WS_REDIS_ACK_REPLICAS=1 means the replica holds the event', async () => {
  const keys = await master.cli('KEYS', 'sluice:h:*');
  assert.equal(keys.trim(), '', 'a fresh master');
  const pub = await Client.connect(gw.url());
  // Concurrent publishes share WAITs: every one is still confirmed before its ack.
  const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => pub.request({ type: 'publish', topic: 'ra:one', data: i })));
  const ids = replies.map((r) => {
    assert.equal(r.status, 'ok', JSON.stringify(r));
    return (r.data as { id: string }).id;
  });
  // Read at once after the last ack: WAIT made the replica hold every acked id already.
  const onReplica = await streamIds(replica, 'ra:one');
  for (const id of ids) assert.ok(onReplica.includes(id), `acked ${id} is not on the replica`);
  assert.equal(await metricValue(gw, 'sluice_redis_replica_ack_failures_total'), 0);
  pub.close();
});

test('a replica that stops confirming: unavailable, counted, stored on the master; the resend with its key gets the first id once it is back', async () => {
  const pub = await Client.connect(gw.url());
  await replica.cli('REPLICAOF', 'NO', 'ONE');
  await eventually(async () => (await master.cli('INFO', 'replication')).includes('connected_slaves:0'), 10_000);

  const t0 = Date.now();
  const r = await pub.request({ type: 'publish', topic: 'ra:two', data: 'first', idempotencyKey: 'k-1' });
  assert.equal(r.status, 'error');
  assert.equal(r.reason, 'unavailable');
  assert.ok(Date.now() - t0 >= 250, 'answered after the ack timeout, not before');
  assert.equal((await streamIds(master, 'ra:two')).length, 1, 'Redis stored it: only the replicas did not confirm it');
  assert.equal(await metricValue(gw, 'sluice_redis_replica_ack_failures_total'), 1);
  // Not a Redis error: the connection is fine.
  assert.equal(await metricValue(gw, 'sluice_redis_errors_total'), 0);
  // Ephemeral events are not stored and wait for nobody.
  assert.equal((await pub.request({ type: 'publish', topic: 'ra:two', data: 'e', ephemeral: true })).status, 'ok');
  // Readiness is Redis's reachability, not its replicas'.
  assert.equal((await fetch(gw.admin('/health/ready'))).status, 200);

  await follow();
  // Resent as a client does after `unavailable`: with the same key, until it is acked (a replica starved of CPU on a
  // busy machine can miss the 300 ms once more; every answer is ok or unavailable, never a second event).
  let again: Record<string, unknown> = {};
  await eventually(async () => {
    again = await pub.request({ type: 'publish', topic: 'ra:two', data: 'first', idempotencyKey: 'k-1' });
    if (again.status !== 'ok') assert.equal(again.reason, 'unavailable', JSON.stringify(again));
    return again.status === 'ok';
  }, 10_000);
  const stored = await streamIds(master, 'ra:two');
  assert.deepEqual(again.data, { id: stored[0], duplicate: true }, 'the first publish\'s id, once');
  assert.ok((await streamIds(replica, 'ra:two')).includes(stored[0]!), 'and the replica holds it now');
  pub.close();
});

test('fewer replicas than WS_REDIS_ACK_REPLICAS: every durable publish is unavailable, the node stays up and the shard does not restart', async () => {
  const strict = await startGateway({ REDIS_URL: master.url, WS_REDIS_ACK_REPLICAS: '2', WS_REDIS_ACK_TIMEOUT_MS: '100', WS_MAX_MESSAGES: '1000' });
  try {
    await eventually(async () => (await fetch(strict.admin('/health/ready'))).status === 200);
    const pub = await Client.connect(strict.url());
    const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => pub.request({ type: 'publish', topic: 'ra:three', data: i })));
    for (const r of replies) assert.equal(r.reason, 'unavailable', JSON.stringify(r));
    assert.equal(await metricValue(strict, 'sluice_redis_replica_ack_failures_total'), 20);
    // The socket is fine: it still joins and pings.
    assert.equal((await pub.request({ type: 'join', topic: 'ra:three' })).status, 'ok');
    assert.equal(await metricValue(strict, 'sluice_shard_restarts_total'), 0);
    pub.close();
  } finally {
    assert.equal(await strict.stop(), 0);
  }
});
