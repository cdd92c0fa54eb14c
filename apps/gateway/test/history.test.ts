// GET /v1/history (PROTOCOL.md, additions of 2026-12) on real gateways: an
// embedded node of two shards (topics owned by either), with its owner shard
// crashed, with a history older than WS_HISTORY_TTL_MS, and two nodes on a
// real Redis (standalone and a 3-master Cluster), with Redis stopped at the
// end. The read's own rules (limit, since, recovered) are unit-tested in
// packages/core/test/history.test.ts and the Broker contract test.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ownerOf, topicKey } from '@sluice/core';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '@sluice/redis/testing';
import { Client, clientsOnShards, eventually, type Gateway, metricValue, startGateway, TEST_ADMIN_TOKEN } from './harness.ts';

interface HistoryEvent {
  readonly id: string;
  readonly data: unknown;
}
interface History {
  readonly events: HistoryEvent[];
  readonly recovered: boolean;
}
interface Answer {
  readonly status: number;
  readonly body: Record<string, unknown>;
}

/** GET /v1/history with `query` as given (a string is sent as is, so that malformed queries can be). */
async function read(gw: Gateway, query: string | Record<string, string>, headers?: Record<string, string>): Promise<Answer> {
  const q = typeof query === 'string' ? query : new URLSearchParams(query).toString();
  const res = await gw.adminFetch(`/v1/history?${q}`, headers === undefined ? {} : { headers });
  assert.equal(res.headers.get('content-type'), 'application/json');
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A read that must answer 200: its body. */
async function history(gw: Gateway, query: Record<string, string>): Promise<History> {
  const got = await read(gw, query);
  assert.equal(got.status, 200, JSON.stringify(got.body));
  assert.deepEqual(Object.keys(got.body), ['events', 'recovered']);
  return got.body as unknown as History;
}

/** Publishes `data` durably through the admin API; its id. */
async function publish(gw: Gateway, topic: string, data: unknown, tenant?: string): Promise<string> {
  const res = await gw.adminPost('/v1/publish', { topic, data, ...(tenant === undefined ? {} : { tenant }) });
  assert.equal(res.status, 200);
  return ((await res.json()) as { id: string }).id;
}

/**
 * A topic name (of tenant `default`) whose hash names `shard` on a node of
 * `shards` shards: its owner once the coordinator (an admin publish or
 * history read) or a socket of that shard touches it first.
 */
function ownedBy(shard: number, prefix: string, shards = 2): string {
  for (let i = 0; ; i++) if (ownerOf(topicKey('default', `${prefix}${i}`), shards) === shard) return `${prefix}${i}`;
}

const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

describe('GET /v1/history, one embedded node with two shards', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_WORKERS: '2', WS_HISTORY_SIZE: '5' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('on topics owned by either shard: the events after since, oldest first, with the ids and data the publishes gave', async () => {
    for (const shard of [0, 1]) {
      const topic = ownedBy(shard, 'h:after');
      // Its first toucher, a socket of the shard the hash names, makes it that shard's.
      const [sub] = (await clientsOnShards(gw.url(), [shard])) as [Client];
      assert.equal((await sub.request({ type: 'join', topic })).status, 'ok');
      const pub = await Client.connect(gw.url());
      const ids = [await publish(gw, topic, { n: 0, s: 'ünï "q"' })];
      ids.push(((await pub.request({ type: 'publish', topic, data: [1, null, { deep: true }] })).data as { id: string }).id);
      // Keyed and ephemeral events are not stored: they never appear.
      assert.equal((await pub.request({ type: 'publish', topic, data: 'k', key: 'K' })).status, 'ok');
      assert.equal((await pub.request({ type: 'publish', topic, data: 'e', ephemeral: true })).status, 'ok');
      ids.push(await publish(gw, topic, 2));
      ids.push(await publish(gw, topic, 'three'));
      const last = await sub.next((f) => f.type === 'event' && f.id === ids[3]);
      const live = [...sub.takeEvents(topic), last].filter((f) => f.id !== undefined).map((f) => ({ id: f.id, data: f.data }));
      assert.deepEqual(live.map((e) => e.id), ids, 'the subscriber got the four durable events');

      assert.deepEqual(await history(gw, { topic, since: ids[0]! }), { events: live.slice(1), recovered: true }, `shard ${shard}`);
      assert.deepEqual(await history(gw, { topic, since: ids[0]!, limit: '2' }), { events: live.slice(1, 3), recovered: true },
        'a limit gives the oldest after since');
      assert.deepEqual(await history(gw, { topic, since: ids[2]!, limit: '2' }), { events: live.slice(3), recovered: true });
      assert.deepEqual(await history(gw, { topic, since: ids[3]! }), { events: [], recovered: true });
      // The default tenant, named or not.
      assert.deepEqual(await history(gw, { tenant: 'default', topic, since: ids[0]! }), { events: live.slice(1), recovered: true });
      for (const c of [sub, pub]) c.close();
    }
  });

  test('without since: the newest limit events, oldest first; limit defaults to 100', async () => {
    const topic = ownedBy(1, 'h:newest');
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await publish(gw, topic, i));
    const newest = await history(gw, { topic, limit: '2' });
    assert.deepEqual(newest.events, [{ id: ids[2], data: 2 }, { id: ids[3], data: 3 }]);
    assert.equal(newest.recovered, false, 'two events were left out');
    const all = await history(gw, { topic });
    assert.deepEqual(all.events.map((e) => e.id), ids);
    // This shard's history began less than WS_HISTORY_TTL_MS (10 min) ago: it cannot vouch that nothing was lost before.
    assert.equal(all.recovered, false);
    assert.deepEqual(await history(gw, { topic: ownedBy(0, 'h:empty') }), { events: [], recovered: false });
  });

  test('WS_HISTORY_SIZE trimmed the early events: a since before the trim answers recovered false, with what is kept', async () => {
    const topic = ownedBy(0, 'h:trim');
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await publish(gw, topic, i));
    const kept = ids.slice(3).map((id, i) => ({ id, data: i + 3 }));
    assert.deepEqual(await history(gw, { topic, since: ids[0]! }), { events: kept, recovered: false });
    assert.deepEqual(await history(gw, { topic, since: ids[1]!, limit: '1' }), { events: kept.slice(0, 1), recovered: false });
    assert.deepEqual(await history(gw, { topic, since: ids[2]! }), { events: kept, recovered: true }, 'ids[2] is the newest trimmed: nothing after it is missing');
    assert.deepEqual(await history(gw, { topic, limit: '1000' }), { events: kept, recovered: false });
  });

  test('each tenant has its own history', async () => {
    const topic = 'h:tenant';
    const mine = await publish(gw, topic, 'acme', 'acme');
    const theirs = await publish(gw, topic, 'default');
    assert.deepEqual((await history(gw, { tenant: 'acme', topic })).events, [{ id: mine, data: 'acme' }]);
    assert.deepEqual((await history(gw, { topic })).events, [{ id: theirs, data: 'default' }]);
    assert.deepEqual((await history(gw, { tenant: 'other', topic })).events, []);
  });

  test('every bad query is a 400 bad_request naming what is wrong, and reads nothing else', async () => {
    const topic = ownedBy(1, 'h:bad');
    const id = await publish(gw, topic, 'only');
    const before = await history(gw, { topic });
    const bad: [string, RegExp][] = [
      [`topic=${topic}&limit=0`, /limit must be a whole number from 1 to 1000/],
      [`topic=${topic}&limit=abc`, /limit must be a whole number from 1 to 1000/],
      [`topic=${topic}&limit=1001`, /limit .*at most 1000/],
      [`topic=${topic}&limit=-1`, /limit/],
      [`topic=${topic}&limit=1.5`, /limit/],
      [`topic=${topic}&limit=`, /limit/],
      [`topic=${topic}&since=abc`, /since must be an event id/],
      [`topic=${topic}&since=${id}x`, /since must be an event id/],
      [`topic=${topic}&since=`, /since must be an event id/],
      ['', /topic is missing/],
      ['limit=5', /topic is missing/],
      ['topic=room%2F42', /topic must match/],
      ['topic=', /topic must match/],
      [`topic=${'t'.repeat(201)}`, /topic must match/],
      [`topic=${topic}&tenant=a%20b`, /tenant must match/],
      [`topic=${topic}&tenant=`, /tenant must match/],
      [`topic=${topic}&sinc=${id}`, /unknown query parameter "sinc"; \/v1\/history takes tenant, topic, since, limit/],
      [`topic=${topic}&limit=1&limit=2`, /limit is given twice/],
      [`topic=${topic}&topic=${topic}`, /topic is given twice/],
    ];
    for (const [query, message] of bad) {
      const got = await read(gw, query);
      assert.equal(got.status, 400, `?${query}: ${JSON.stringify(got.body)}`);
      assert.deepEqual(Object.keys(got.body), ['reason', 'message']);
      assert.equal(got.body.reason, 'bad_request');
      assert.match(String(got.body.message), message, `?${query}`);
    }
    assert.deepEqual(await history(gw, { topic }), before, 'the topic is as it was');
  });

  test('needs the admin token: 401 without it or with another, and the answer holds no event', async () => {
    const topic = ownedBy(0, 'h:auth');
    await publish(gw, topic, 'secret');
    for (const authorization of ['', 'Bearer wrong', `Bearer ${TEST_ADMIN_TOKEN}x`, TEST_ADMIN_TOKEN]) {
      const res = await fetch(gw.admin(`/v1/history?topic=${topic}`), { headers: authorization === '' ? {} : { authorization } });
      assert.equal(res.status, 401, authorization);
      assert.equal(res.headers.get('www-authenticate'), 'Bearer');
      const body = (await res.json()) as Record<string, unknown>;
      assert.deepEqual(Object.keys(body), ['reason', 'message']);
      assert.equal(body.reason, 'unauthorized');
    }
    assert.equal((await fetch(gw.admin('/v1/history'), { method: 'POST', body: '{}' })).status, 405, 'GET only');
  });
});

describe('GET /v1/history while the owner shard restarts after a crash', () => {
  test('503 unavailable for its topics, the other shard\'s still answer; after the restart its history starts empty (recovered false)', async () => {
    const gw = await startGateway({ WS_WORKERS: '2', SLUICE_TEST_HOOKS: '1' });
    try {
      const lost = ownedBy(0, 'h:lost');
      const kept = ownedBy(1, 'h:kept');
      const lostId = await publish(gw, lost, 'gone');
      const keptId = await publish(gw, kept, 'stays');
      const [victim] = await clientsOnShards(gw.url(), [0]);
      victim!.send({ type: 'debug.crash' });
      await victim!.closedBy();
      // The coordinator restarts the shard 250 ms after it learns of the
      // crash; a read sent as soon as the shard closed its sockets comes
      // before that, whether it reaches the dying shard or none.
      const down = await read(gw, { topic: lost, since: lostId });
      assert.equal(down.status, 503, JSON.stringify(down.body));
      assert.equal(down.body.reason, 'unavailable');
      assert.match(String(down.body.message), /shard 0, which keeps the topic's history, is restarting/);
      assert.deepEqual(await history(gw, { topic: kept, since: '0-0' }), { events: [{ id: keptId, data: 'stays' }], recovered: false });
      await eventually(() => gw.logs.some((l) => l.msg === 'shard restarted'), 10_000);
      assert.deepEqual(await history(gw, { topic: lost, since: lostId }), { events: [], recovered: false },
        'the restarted shard cannot vouch for what its predecessor held');
    } finally {
      assert.equal(await gw.stop(), 0, gw.stderr());
    }
  });
});

describe('a topic is owned by the shard of its first toucher', () => {
  test('a socket\'s own topic lives on its shard: its history outlives a crash of the shard the hash would have chosen', async () => {
    const gw = await startGateway({ WS_WORKERS: '2', SLUICE_TEST_HOOKS: '1' });
    try {
      // The hash names shard 1 for this topic; a socket of shard 0 touches it first.
      const topic = ownedBy(1, 'h:first');
      const [mine, victim] = await clientsOnShards(gw.url(), [0, 1]);
      const slots = await metricValue(gw, 'sluice_topic_owner_slots');
      assert.equal((await mine!.request({ type: 'join', topic })).status, 'ok');
      assert.equal(await metricValue(gw, 'sluice_topic_owner_slots'), slots + 1, 'the join claimed its topic\'s slot');
      const ack = await mine!.request({ type: 'publish', topic, data: 'kept' });
      assert.equal(ack.status, 'ok');
      const id = (ack.data as { id: string }).id;
      await mine!.next((f) => f.type === 'event' && f.id === id);
      victim!.send({ type: 'debug.crash' });
      await victim!.closedBy();
      // While shard 1 is down and after it is back, the topic's owner (shard 0) answers with what it keeps.
      assert.deepEqual(await history(gw, { topic, since: '0-0' }), { events: [{ id, data: 'kept' }], recovered: false });
      await eventually(() => gw.logs.some((l) => l.msg === 'shard restarted'), 10_000);
      assert.deepEqual(await history(gw, { topic, since: '0-0' }), { events: [{ id, data: 'kept' }], recovered: false });
      // A socket of the restarted shard 1 joining since 0-0 gets it replayed from shard 0.
      const [late] = await clientsOnShards(gw.url(), [1]);
      const joined = await late!.request({ type: 'join', topic, since: '0-0' });
      assert.equal(joined.status, 'ok');
      assert.equal((await late!.next((f) => f.type === 'event' && f.topic === topic)).data, 'kept');
      for (const c of [mine!, late!]) c.close();
    } finally {
      assert.equal(await gw.stop(), 0, gw.stderr());
    }
  });
});

describe('GET /v1/history without since, once the history is older than WS_HISTORY_TTL_MS', () => {
  const TTL_MS = 3000;
  let gw: Gateway;
  let readyAt: number;
  before(async () => {
    gw = await startGateway({ WS_WORKERS: '2', WS_HISTORY_TTL_MS: String(TTL_MS), WS_HISTORY_SIZE: '3' });
    readyAt = Date.now();
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('recovered is true when the answer holds every event of the last ttl, false when the limit or WS_HISTORY_SIZE left some out', async () => {
    const topic = ownedBy(0, 'h:ttl');
    assert.deepEqual(await history(gw, { topic }), { events: [], recovered: false }, 'a history younger than the ttl vouches for nothing');
    // The shards' histories began before the node was ready: a ttl after that, nothing older can be asked for.
    await delay(readyAt + TTL_MS + 50 - Date.now());
    assert.deepEqual(await history(gw, { topic }), { events: [], recovered: true });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await publish(gw, topic, i));
    assert.deepEqual(await history(gw, { topic }), { events: ids.map((id, i) => ({ id, data: i })), recovered: true });
    assert.deepEqual(await history(gw, { topic, limit: '2' }), { events: ids.slice(1).map((id, i) => ({ id, data: i + 1 })), recovered: false });
    ids.push(await publish(gw, topic, 3));
    assert.deepEqual(await history(gw, { topic }), { events: ids.slice(1).map((id, i) => ({ id, data: i + 1 })), recovered: false },
      'the first event was trimmed by WS_HISTORY_SIZE');
  });
});

for (const mode of ['standalone', 'cluster'] as const) {
  describe(`GET /v1/history, two nodes on Redis (${mode})`, () => {
    let redis: RedisServer | RedisCluster;
    let a: Gateway;
    let b: Gateway;
    before(async () => {
      redis = mode === 'standalone' ? await startRedis() : await startRedisCluster();
      const env = { REDIS_URL: redis.url, ...(mode === 'cluster' ? { REDIS_CLUSTER: '1' } : {}), WS_HISTORY_SIZE: '5', WS_MAX_MESSAGES: '1000' };
      [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
      for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
    });
    after(async () => {
      for (const gw of [a, b]) assert.equal(await gw.stop(), 0);
      await redis.stop();
    });

    test('a node other than the publisher reads the same events, ids and order; since, limit and recovered as in memory', async () => {
      const topic = 'h:cluster';
      const pub = await Client.connect(a.url());
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await publish(a, topic, { i }));
      ids.push(((await pub.request({ type: 'publish', topic, data: 'socket' })).data as { id: string }).id);
      assert.equal((await pub.request({ type: 'publish', topic, data: 'e', ephemeral: true })).status, 'ok');
      const events = ids.map((id, i) => ({ id, data: i < 3 ? { i } : 'socket' }));
      for (const gw of [b, a]) {
        // No start guard in Redis: the stream holds every event of the last ttl.
        assert.deepEqual(await history(gw, { topic }), { events, recovered: true });
        assert.deepEqual(await history(gw, { topic, limit: '2' }), { events: events.slice(2), recovered: false });
        assert.deepEqual(await history(gw, { topic, since: ids[0]!, limit: '2' }), { events: events.slice(1, 3), recovered: true });
        assert.deepEqual(await history(gw, { topic, since: ids[3]! }), { events: [], recovered: true });
      }
      // Past WS_HISTORY_SIZE (5): the first two are trimmed.
      for (let i = 4; i < 7; i++) ids.push(await publish(b, topic, i));
      const now = [...events, ...ids.slice(4).map((id, i) => ({ id, data: i + 4 }))].slice(2);
      assert.deepEqual(await history(a, { topic, since: ids[0]! }), { events: now, recovered: false });
      assert.deepEqual(await history(a, { topic, since: ids[1]! }), { events: now, recovered: true });
      assert.deepEqual(await history(a, { topic }), { events: now, recovered: false });
      assert.deepEqual(await history(b, { topic: 'h:never' }), { events: [], recovered: true });
      pub.close();
    });

    if (mode === 'standalone') {
      test('Redis stopped: 503 unavailable with a message on every node', async () => {
        await publish(a, 'h:down', 1);
        await redis.stop();
        for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 503);
        for (const gw of [a, b]) {
          for (const query of [{ topic: 'h:down' }, { topic: 'h:down', since: '0-0' }] as Record<string, string>[]) {
            const got = await read(gw, query);
            assert.equal(got.status, 503, JSON.stringify(got.body));
            assert.equal(got.body.reason, 'unavailable');
            assert.match(String(got.body.message), /redis/);
          }
        }
      });
    }
  });
}
