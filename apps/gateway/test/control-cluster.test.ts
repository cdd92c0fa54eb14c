// Server-side control across the cluster: two nodes on one real Redis
// (standalone), then on a Redis Cluster. A command taken by node A's admin
// API acts on node B's sockets within 1 s; a revocation survives node
// restarts (the set in Redis is read at every connect) and, with a Redis
// that persists, a Redis restart; with Redis gone the admin API answers 503
// and nothing is half done.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, metricValue, rawUpgrade, startGateway } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';

async function ready(gw: Gateway): Promise<void> {
  await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200, 10_000);
}

/** Sockets of `t` on each node. */
async function spread(nodes: Gateway[], t: string, perNode: number): Promise<Client[][]> {
  return Promise.all(nodes.map(async (gw) => Promise.all(Array.from({ length: perNode }, () => Client.connect(gw.url(), bearer(t))))));
}

describe('control across two nodes on one Redis', () => {
  let redis: RedisServer;
  let env: Record<string, string>;
  let a: Gateway;
  let b: Gateway;
  before(async () => {
    redis = await startRedis({ persist: true });
    env = { REDIS_URL: redis.url, WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_MAX_MESSAGES: '100000' };
    [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
    await Promise.all([ready(a!), ready(b!)]);
  });
  after(async () => {
    for (const gw of [a, b]) if (gw.alive) assert.equal(await gw.stop(), 0);
    await redis.stop();
  });

  test('a revocation sent to node A closes the user\'s sockets on both nodes within 1 s; node B refuses the token', async () => {
    const old = await token({ sub: 'c-rv', topics: ['*'] });
    const [onA, onB] = await spread([a, b], old, 3);
    const bystander = await Client.connect(b.url(), bearer(await token({ sub: 'c-other' })));
    const t0 = Date.now();
    assert.equal((await a.adminPost('/v1/revoke', { user: 'c-rv' })).status, 202);
    const closes = await Promise.all([...onA!, ...onB!].map(async (c) => {
      const closed = await c.closedBy(2000);
      return { code: closed.code, at: Date.now() };
    }));
    for (const c of closes) assert.equal(c.code, 4003);
    const last = Math.max(...closes.map((c) => c.at)) - t0;
    assert.ok(last < 1000, `the last socket closed ${last} ms after the request`);
    assert.equal((await bystander.request({ type: 'ping' })).type, 'pong');
    for (const gw of [a, b]) {
      const r = await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${old}` } });
      assert.deepEqual([r.status, JSON.parse(r.body)], [401, { reason: 'token_revoked' }]);
    }
    assert.equal(await metricValue(b, 'sluice_control_commands_received_total'), 1);
    assert.equal(await metricValue(b, 'sluice_admin_sockets_total', '{action="revoke"}'), 3);
    assert.equal(Number(await redis.cli('ZCARD', 'sluice:rv')), 1, 'the revocation is in the set');
    bystander.close();
  });

  test('messages on the control channel that are not commands are ignored: no node or shard goes down', async () => {
    const c = await Client.connect(b.url(), bearer(await token({ sub: 'c-garbage' })));
    const garbage = ['null', 'not json', '[]', '{"from":"x"}', '{"from":"x","cmd":{"op":"disconnect"}}',
      '{"from":"x","cmd":{"op":"revoke","revocation":null}}', '{"from":"x","cmd":{"op":"revocations","list":1}}',
      '{"from":"x","cmd":{"op":"a-newer-command","user":"c-garbage"}}', '{"from":"x","cmd":{"op":"subscribe","tenant":"default"}}'];
    for (const m of garbage) await redis.cli('PUBLISH', 'sluice:ctl', m);
    for (const gw of [a, b]) await eventually(async () => (await metricValue(gw, 'sluice_control_messages_ignored_total')) === garbage.length);
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    for (const gw of [a, b]) assert.ok(gw.alive);
    assert.equal(await metricValue(b, 'sluice_shard_restarts_total'), 0);
    // A well-formed command from "another node" is carried out.
    await redis.cli('PUBLISH', 'sluice:ctl', JSON.stringify({ from: 'x', cmd: { op: 'disconnect', target: { tenant: 'default', user: 'c-garbage' }, retry: false } }));
    assert.equal((await c.closedBy(1000)).code, 1008);
  });

  test('a node started after the revocation refuses the token from its first upgrade', async () => {
    const old = await token({ sub: 'c-late' });
    assert.equal((await a.adminPost('/v1/revoke', { user: 'c-late' })).status, 202);
    const late = await startGateway(env);
    try {
      await ready(late);
      await eventually(async () => (await metricValue(late, 'sluice_revocations')) >= 2, 5000);
      const r = await rawUpgrade(late.port, { headers: { authorization: `Bearer ${old}` } });
      assert.equal(r.status, 401);
      assert.deepEqual(JSON.parse(r.body), { reason: 'token_revoked' });
      assert.ok(late.logs.some((l) => l.msg === 'revocations loaded from redis' && Number(l.revocations) >= 2));
    } finally {
      assert.equal(await late.stop(), 0);
    }
  });

  test('disconnect, subscribe and unsubscribe sent to node A act on node B\'s sockets', async () => {
    const t = await token({ sub: 'c-ctl', topics: [] });
    const [socketsA, socketsB] = await spread([a, b], t, 2);
    const [onA] = socketsA!;
    const [onB, onB2] = socketsB!;
    const watcher = await Client.connect(b.url(), bearer(await token({ sub: 'c-watch', topics: ['*'] })));
    assert.equal((await watcher.request({ type: 'join', topic: 'room:c' })).status, 'ok');
    assert.equal((await a.adminPost('/v1/subscribe', { user: 'c-ctl', topic: 'room:c' })).status, 202);
    for (const c of [onA!, onB!, onB2!]) await c.next((f) => f.type === 'subscribed' && f.topic === 'room:c', 1000);
    assert.equal((await a.adminPost('/v1/publish', { topic: 'room:c', data: 'both' })).status, 200);
    for (const c of [onA!, onB!, onB2!]) assert.equal((await c.next((f) => f.type === 'event' && f.topic === 'room:c')).data, 'both');
    assert.equal((await b.adminPost('/v1/unsubscribe', { user: 'c-ctl', topic: 'room:c' })).status, 202);
    for (const c of [onA!, onB!, onB2!]) {
      assert.deepEqual(await c.next((f) => f.type === 'unsubscribed', 1000), { type: 'unsubscribed', topic: 'room:c', reason: 'removed' });
    }
    assert.equal((await a.adminPost('/v1/disconnect', { connectionId: onB!.welcome.connectionId, reconnect: true })).status, 202);
    assert.equal((await onB!.closedBy(1000)).code, 4000);
    assert.equal((await onB2!.request({ type: 'ping' })).type, 'pong', 'only the named connection closed');
    assert.equal((await a.adminPost('/v1/disconnect', { user: 'c-ctl' })).status, 202);
    for (const c of [onA!, onB2!]) assert.equal((await c.closedBy(1000)).code, 1008);
    assert.equal((await watcher.request({ type: 'ping' })).type, 'pong');
    watcher.close();
  });

  test('with Redis gone the admin API answers 503 and no node acts; a node that reconnects reloads the revocations', async () => {
    const old = await token({ sub: 'c-outage' });
    const early = await Client.connect(b.url(), bearer(old));
    // A revocation written to the set that no node heard (as if sent while they could not listen).
    const now = Date.now();
    await redis.cli('ZADD', 'sluice:rv', String(now + 600_000), JSON.stringify(['u', 'default', 'c-outage', now]));
    assert.equal((await early.request({ type: 'ping' })).type, 'pong');
    await redis.stop();
    await eventually(async () => (await fetch(a.admin('/health/ready'))).status === 503, 10_000);
    const res = await a.adminPost('/v1/revoke', { user: 'c-other-outage' });
    assert.equal(res.status, 503);
    const body = (await res.json()) as { reason: string; message: string };
    assert.equal(body.reason, 'unavailable');
    assert.match(body.message, /redis/);
    assert.equal((await early.request({ type: 'ping' })).type, 'pong', 'nothing was done while Redis was away');
    // Redis comes back (it persisted the set): the nodes reconnect, read the set, and close what it names.
    await redis.start();
    assert.equal((await early.closedBy(10_000)).code, 4003);
    await Promise.all([ready(a), ready(b)]);
    for (const gw of [a, b]) {
      assert.equal((await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${await token({ sub: 'c-rv' }, 1)}` } })).status, 401,
        'the revocation made before the outage still holds');
      // The revocation refused with 503 was kept nowhere: an old token of that user still opens a socket.
      const still = await Client.connect(gw.url(), bearer(await token({ sub: 'c-other-outage' }, 1)));
      assert.equal((await still.request({ type: 'ping' })).type, 'pong');
      still.close();
    }
  });
});

describe('control across two nodes on a Redis Cluster', () => {
  let cluster: RedisCluster;
  let nodes: Gateway[];
  before(async () => {
    cluster = await startRedisCluster();
    const env = { REDIS_URL: cluster.url, REDIS_CLUSTER: '1', WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET };
    nodes = await Promise.all([startGateway(env), startGateway(env)]);
    await Promise.all(nodes.map(ready));
  });
  after(async () => {
    for (const gw of nodes) assert.equal(await gw.stop(), 0);
    await cluster.stop();
  });

  test('a revocation and a disconnect sent to one node reach the other within 1 s', async () => {
    const t = await token({ sub: 'rc-user' });
    const [onA, onB] = await spread(nodes, t, 2);
    const t0 = Date.now();
    assert.equal((await nodes[0]!.adminPost('/v1/disconnect', { user: 'rc-user', reconnect: true })).status, 202);
    for (const c of [...onA!, ...onB!]) assert.equal((await c.closedBy(1000)).code, 4000);
    assert.ok(Date.now() - t0 < 1000);
    const again = await Client.connect(nodes[1]!.url(), bearer(t));
    assert.equal((await nodes[0]!.adminPost('/v1/revoke', { user: 'rc-user' })).status, 202);
    assert.equal((await again.closedBy(1000)).code, 4003);
    assert.equal((await rawUpgrade(nodes[1]!.port, { headers: { authorization: `Bearer ${t}` } })).status, 401);
  });
});
