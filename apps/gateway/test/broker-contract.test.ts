/**
 * The Broker contract (packages/core/src/broker.ts), run against the embedded
 * implementation (two MeshBrokers joined by a real MessageChannel, as two
 * shards are) and against the Redis broker (two nodes on one real
 * redis-server, standalone and a 3-master Cluster).
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MessageChannel } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { type Broker, type Config, type Delivery, loadConfig, type PublishFields, type PublishResult, topicKey, TopicOwners, topicRedisKeys } from '@sluice/core';
import { compareEventIdStrings, EventClass } from '@sluice/protocol';
import { createLogger } from '@sluice/telemetry';
import { MeshBroker } from '../src/mesh-broker.ts';
import { RedisBroker } from '../src/redis-broker.ts';
import { eventually } from '../src/testing/index.ts';
import type { ShardBroker } from '../src/shard-broker.ts';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '@sluice/redis/testing';

const { config } = loadConfig({ WS_HISTORY_SIZE: '5', LOG_LEVEL: 'silent' }, { availableParallelism: 2 });
const log = createLogger('silent');
const channels: MessageChannel[] = [];
after(() => {
  for (const ch of channels) {
    ch.port1.close();
    ch.port2.close();
  }
});

interface Node {
  readonly broker: Broker;
  readonly got: Delivery[];
}

/**
 * The embedded pairs' table of topic owners: one for the file, so that
 * `ownedBy` can claim a topic for a shard before the test touches it.
 */
const owners = new TopicOwners(2);

function pair(cfg: Config = config, table: TopicOwners = owners): [Node, Node, MessageChannel] {
  const a = new MeshBroker(0, 2, cfg, log, table);
  const b = new MeshBroker(1, 2, cfg, log, table);
  const ch = new MessageChannel();
  channels.push(ch);
  a.addPeer(1, ch.port1);
  b.addPeer(0, ch.port2);
  const na: Node = { broker: a, got: [] };
  const nb: Node = { broker: b, got: [] };
  a.onDelivery((d) => na.got.push(d));
  b.onDelivery((d) => nb.got.push(d));
  return [na, nb, ch];
}

/** A client topic name whose tenant-scoped key is owned by `shard` (claimed for it in the embedded pairs' table). */
function ownedBy(shard: number, prefix: string): string {
  for (let i = 0; ; i++) if (owners.claim(topicKey('default', `${prefix}${i}`), shard) === shard) return `${prefix}${i}`;
}

const durable = (topic: string, data: unknown, idempotencyKey?: string): PublishFields =>
  ({ topic, dataJson: JSON.stringify(data), cls: EventClass.Durable, key: undefined, idempotencyKey, traceparent: undefined });

// Long enough for a delivery through Redis on loopback to arrive, when one is coming.
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 100));

interface Impl {
  readonly name: string;
  /** Embedded: the shard that owns the test's topics (the pair is used from shard 0). */
  readonly owner: number;
  /** `env`: more settings of the pair's gateway config (WS_HISTORY_TTL_MS, ...). */
  pair(env?: Record<string, string>): Promise<[Node, Node]>;
  /** Redis Cluster keeps idempotency records per (tenant, topic): see RedisBus. */
  readonly cluster: boolean;
  /**
   * Embedded: the owner's history began with the broker, so a read without
   * since vouches for nothing until a ttl has passed (recovered false); a
   * Redis stream has no such start.
   */
  readonly startedNow: boolean;
}

const servers = new Map<string, Promise<RedisServer | RedisCluster>>();
const redisBrokers: RedisBroker[] = [];
after(async () => {
  for (const r of redisBrokers) r.close();
  for (const s of servers.values()) await (await s).stop();
});

/** Two nodes (one shard each) on one Redis: a RedisBroker each, with its own mesh. */
async function redisPair(mode: 'standalone' | 'cluster', env: Record<string, string> = {}): Promise<[Node, Node]> {
  if (!servers.has(mode)) servers.set(mode, mode === 'standalone' ? startRedis() : startRedisCluster());
  const server = await servers.get(mode)!;
  const cfg = loadConfig({ WS_HISTORY_SIZE: '5', LOG_LEVEL: 'silent', REDIS_URL: server.url, ...(mode === 'cluster' ? { REDIS_CLUSTER: '1' } : {}), ...env },
    { availableParallelism: 1 }).config;
  const nodes = [0, 1].map(() => {
    const broker = new RedisBroker(0, new MeshBroker(0, 1, cfg, log, new TopicOwners(1)), cfg, log);
    redisBrokers.push(broker);
    const node: Node = { broker, got: [] };
    broker.onDelivery((d) => node.got.push(d));
    return node;
  });
  await Promise.all(redisBrokers.slice(-2).map((b) => b.connected(5000)));
  return [nodes[0]!, nodes[1]!];
}

const impls: Impl[] = [
  ...[0, 1].map((owner) => ({ name: `embedded broker, topic owned by shard ${owner}, used from shard 0`, owner,
    pair: (env?: Record<string, string>) => Promise.resolve(pair(env === undefined ? config : loadConfig({ WS_HISTORY_SIZE: '5', LOG_LEVEL: 'silent', ...env },
      { availableParallelism: 2 }).config).slice(0, 2) as [Node, Node]), cluster: false, startedNow: true })),
  { name: 'Redis broker, two nodes on standalone Redis', owner: 0, pair: (env) => redisPair('standalone', env), cluster: false, startedNow: false },
  { name: 'Redis broker, two nodes on a 3-master Redis Cluster', owner: 0, pair: (env) => redisPair('cluster', env), cluster: true, startedNow: false },
];

for (const impl of impls) {
  const owner = impl.owner;
  describe(impl.name, () => {
    test('a durable publish resolves with an id after it is stored; subscribers on both shards get it once', async () => {
      const [a, b] = await impl.pair();
      const topic = ownedBy(owner, 'dur');
      const key = topicKey('default', topic);
      await a.broker.subscribe(key);
      await b.broker.subscribe(key);
      const res = await a.broker.publish('default', durable(topic, { n: 1 }));
      assert.equal(res.ok, true);
      assert.ok(res.ok && res.id !== undefined && /^\d+-\d+$/.test(res.id));
      await settle();
      for (const n of [a, b]) {
        assert.equal(n.got.length, 1);
        assert.equal(n.got[0]!.id, res.ok ? res.id : '');
        // Through Redis the class crossed as a number (it once crossed as 1, keyed: the lag metric's class label was wrong).
        assert.equal(n.got[0]!.cls, EventClass.Durable);
        assert.deepEqual(JSON.parse(n.got[0]!.frame), { type: 'event', topic, id: res.ok ? res.id : '', data: { n: 1 } });
      }
      const h = await b.broker.history(key, '0-0');
      assert.deepEqual(h.events.map((e) => e.id), [res.ok ? res.id : '']);
    });

    test('a repeated idempotency key resolves with the first id, duplicate, and is not delivered again', async () => {
      const [a, b] = await impl.pair();
      const topic = ownedBy(owner, 'idem');
      await b.broker.subscribe(topicKey('default', topic));
      const first = await a.broker.publish('default', durable(topic, 1, 'k1'));
      const again = await b.broker.publish('default', durable(topic, 2, 'k1'));
      assert.ok(first.ok && again.ok);
      assert.equal(again.id, first.id);
      assert.equal(again.duplicate, true);
      await settle();
      assert.equal(b.got.length, 1);
    });

    test('idempotency is per tenant: the same key on another topic is a repeat; another tenant may reuse it', async () => {
      const [a, b] = await impl.pair();
      const t1 = ownedBy(owner, 'one');
      const t2 = ownedBy(1 - owner, 'two');
      await b.broker.subscribe(topicKey('default', t2));
      await b.broker.subscribe(topicKey('acme', t2));
      const first = await a.broker.publish('default', durable(t1, 1, 'shared-key'));
      const other = await b.broker.publish('default', durable(t2, 2, 'shared-key'));
      assert.ok(first.ok && other.ok);
      if (impl.cluster) assert.equal(other.duplicate, false, 'Cluster: a key is remembered per (tenant, topic)');
      else assert.deepEqual(other, { ok: true, id: first.id, duplicate: true });
      const tenant = await a.broker.publish('acme', durable(t2, 3, 'shared-key'));
      assert.ok(tenant.ok && tenant.duplicate === false);
      await settle();
      // Two topics (default's and acme's): no order between them (on a Cluster their channels may be on two masters).
      assert.deepEqual(b.got.map((d) => JSON.parse(d.frame).data as number).sort(), impl.cluster ? [2, 3] : [3]);
    });

    test('repeats racing the first publish from both shards are delivered once and all get its id', async () => {
      const [a, b] = await impl.pair();
      const topic = ownedBy(owner, 'race');
      await b.broker.subscribe(topicKey('default', topic));
      const results = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).broker.publish('default', durable(topic, i, 'raced'))));
      const ids = new Set(results.map((r) => (r.ok ? r.id : 'failed')));
      assert.equal(ids.size, 1);
      assert.equal(results.filter((r) => r.ok && !r.duplicate).length, 1);
      await settle();
      assert.equal(b.got.length, 1);
    });

    test('keyed and ephemeral events get no id and are not stored', async () => {
      const [a, b] = await impl.pair();
      const topic = ownedBy(owner, 'eph');
      const key = topicKey('default', topic);
      await b.broker.subscribe(key);
      const k = await a.broker.publish('default', { ...durable(topic, 1), cls: EventClass.Keyed, key: 'BTC' });
      const e = await a.broker.publish('default', { ...durable(topic, 2), cls: EventClass.Ephemeral });
      assert.deepEqual([k, e], [{ ok: true, id: undefined, duplicate: false }, { ok: true, id: undefined, duplicate: false }]);
      await settle();
      assert.deepEqual(b.got.map((d) => [d.cls, d.key, d.id]), [[EventClass.Keyed, 'BTC', undefined], [EventClass.Ephemeral, undefined, undefined]]);
      assert.deepEqual((await a.broker.history(key, '0-0')).events, []);
    });

    test('deliveries keep the order the owner accepted; unsubscribe stops them', async () => {
      const [a, b] = await impl.pair();
      const topic = ownedBy(owner, 'ord');
      const key = topicKey('default', topic);
      await b.broker.subscribe(key);
      const acks = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).broker.publish('default', durable(topic, i))));
      await settle();
      // The owner's order is the id order, whichever shard each publish came from.
      const byId = (x: string, y: string): number => {
        const [xm, xs] = x.split('-').map(Number);
        const [ym, ys] = y.split('-').map(Number);
        return xm! - ym! || xs! - ys!;
      };
      const acked = acks.map((r) => (r.ok ? r.id! : '')).sort(byId);
      assert.deepEqual(b.got.map((d) => d.id), acked);
      b.broker.unsubscribe(key);
      await settle();
      await a.broker.publish('default', durable(topic, 'late'));
      await settle();
      assert.equal(b.got.length, 20);
    });

    test('subscribe resolves with the topic position: its newest id, or an id every later event is above; since it, history is complete', async () => {
      const [a, b] = await impl.pair();
      for (const earlier of [0, 2]) {
        const topic = ownedBy(owner, `pos${earlier}-`);
        const key = topicKey('default', topic);
        const before: string[] = [];
        for (let i = 0; i < earlier; i++) {
          const r = await b.broker.publish('default', durable(topic, i));
          before.push(r.ok ? r.id! : '');
        }
        const position = await a.broker.subscribe(key);
        assert.match(String(position), /^\d+-\d+$/);
        if (earlier > 0) assert.equal(position, before.at(-1));
        const after: string[] = [];
        for (let i = 0; i < 3; i++) {
          const r = await b.broker.publish('default', durable(topic, i));
          after.push(r.ok ? r.id! : '');
        }
        for (const id of after) assert.ok(compareEventIdStrings(id, position!)! > 0, `${id} above ${position}`);
        await settle();
        assert.deepEqual(a.got.filter((d) => d.topic === key).map((d) => d.id), after, 'delivered to the subscriber');
        const read = await b.broker.history(key, position);
        assert.deepEqual([read.events.map((e) => e.id), read.recovered], [after, true]);
        a.broker.unsubscribe(key);
      }
    });

    test('a topic with no stored event vouches for a position past the ttl (a keyed-only feed); a new topic for nothing older than ttl + tombstone', async () => {
      const [a, b] = await impl.pair({ WS_HISTORY_TTL_MS: '1000' });
      const topic = ownedBy(owner, 'feed');
      const key = topicKey('default', topic);
      const position = await a.broker.subscribe(key);
      a.broker.unsubscribe(key);
      // Past the ttl: a durable event in that time would have expired, and the topic still knows none was published.
      await new Promise((r) => setTimeout(r, 1300));
      assert.deepEqual(await b.broker.history(key, position), { events: [], recovered: true });
      const r = await b.broker.publish('default', durable(topic, 1));
      const read = await b.broker.history(key, position);
      assert.deepEqual([read.events.map((e) => e.id), read.recovered], [[r.ok ? r.id : ''], true]);

      // The tombstone is max(ttl, 1 h): a since from 2 h ago predates anything a new topic can vouch for.
      const [c] = await impl.pair();
      const fresh = topicKey('default', ownedBy(owner, 'fresh'));
      const first = await c.broker.publish('default', durable(ownedBy(owner, 'fresh'), 1));
      const old = await c.broker.history(fresh, `${Date.now() - 2 * 3_600_000}-0`);
      assert.deepEqual([old.events.map((e) => e.id), old.recovered], [[first.ok ? first.id : ''], false]);
      // 30 min ago: within ttl + tombstone; the embedded history started just now and vouches for nothing before.
      assert.equal((await c.broker.history(fresh, `${Date.now() - 1_800_000}-0`)).recovered, !impl.startedNow);
    });

    test('a quiet topic gets a position mark after WS_POSITION_REFRESH_MS, on every node, above its events; a since of it recovers; none with 0', async () => {
      const [a, b] = await impl.pair({ WS_POSITION_REFRESH_MS: '1000' });
      const topic = ownedBy(owner, 'quiet');
      const key = topicKey('default', topic);
      await Promise.all([a.broker.subscribe(key), b.broker.subscribe(key)]);
      const r = await a.broker.publish('default', durable(topic, 1));
      assert.ok(r.ok && r.id !== undefined);
      await settle();
      const sweep = (nodes: Node[], now: number): void => {
        for (const n of nodes) (n.broker as ShardBroker).sweep(now);
      };
      const marks = (n: Node): Delivery[] => n.got.filter((d) => d.frame.startsWith('{"type":"position"'));
      sweep([a, b], Date.now());
      await settle();
      assert.deepEqual([marks(a).length, marks(b).length], [0, 0], 'none for a topic whose newest event is younger than the interval');
      // The brokers are handed a clock past the interval (the shard's sweep hands them Date.now() each second).
      sweep([a, b], Date.now() + 5000);
      await eventually(() => marks(a).length > 0 && marks(b).length > 0);
      const m = marks(a)[0]!;
      assert.equal(marks(b)[0]!.id, m.id, 'one mark reaches both nodes');
      assert.equal(m.frame, `{"type":"position","topic":"${topic}","position":"${m.id}"}`);
      assert.deepEqual([m.cls, m.key, m.at], [EventClass.Ephemeral, undefined, 0], 'dropped by a congested mailbox, with no delivery lag');
      assert.ok((compareEventIdStrings(m.id!, r.id) ?? 0) > 0, `the mark ${m.id} is above the event ${r.id}`);
      assert.ok(a.got.findIndex((d) => d.id === r.id) < a.got.indexOf(m), 'and comes after it');
      assert.deepEqual(await b.broker.history(key, m.id), { events: [], recovered: true });
      const e2 = await b.broker.publish('default', durable(topic, 2));
      assert.ok(e2.ok && (compareEventIdStrings(e2.id!, m.id!) ?? 0) > 0, 'an event after a mark is above it');
      const read = await a.broker.history(key, m.id);
      assert.deepEqual([read.events.map((e) => e.id), read.recovered], [[e2.id], true]);

      // Asked once per interval: a second sweep at the same time (a node clock
      // ahead of Redis's would find the topic due each second) asks nothing.
      const asked = (n: Node): number => (n.broker as ShardBroker).stats.positionMarks;
      const before = asked(a) + asked(b);
      assert.ok(before >= 1 && before <= 2, `one mark asked per shard at most: ${before}`);
      sweep([a, b], Date.now() + 5000);
      await settle();
      assert.equal(asked(a) + asked(b), before, 'not asked again within the interval');

      const [c, d] = await impl.pair({ WS_POSITION_REFRESH_MS: '0' });
      const off = ownedBy(owner, 'unmarked');
      await Promise.all([c.broker.subscribe(topicKey('default', off)), d.broker.subscribe(topicKey('default', off))]);
      sweep([c, d], Date.now() + 7_200_000);
      await settle();
      assert.deepEqual([...marks(c), ...marks(d)], [], 'WS_POSITION_REFRESH_MS=0 sends none');
    });

    test('history after since is bounded: recovered false once trimmed, true from the last id on', async () => {
      const [a] = await impl.pair();
      const topic = ownedBy(owner, 'hist');
      const key = topicKey('default', topic);
      const ids: string[] = [];
      for (let i = 0; i < 8; i++) {
        const r = await a.broker.publish('default', durable(topic, i));
        ids.push(r.ok ? r.id! : '');
      }
      const all = await a.broker.history(key, ids[0]!);
      assert.equal(all.recovered, false);
      assert.deepEqual(all.events.map((e) => e.id), ids.slice(3));
      const tail = await a.broker.history(key, ids[5]!);
      assert.equal(tail.recovered, true);
      assert.deepEqual(tail.events.map((e) => e.id), ids.slice(6));
    });

    test('history with a limit: after since, the oldest first (read on from the last id); without since, the newest', async () => {
      const [a, b] = await impl.pair();
      const topic = ownedBy(owner, 'page');
      const key = topicKey('default', topic);
      const ids: string[] = [];
      for (let i = 0; i < 8; i++) {
        const r = await a.broker.publish('default', durable(topic, i));
        ids.push(r.ok ? r.id! : '');
      }
      // WS_HISTORY_SIZE=5 kept ids[3..7]; ids[2] is the newest trimmed.
      const first = await b.broker.history(key, ids[2]!, 2);
      assert.deepEqual([first.events.map((e) => e.id), first.recovered], [ids.slice(3, 5), true]);
      assert.deepEqual(JSON.parse(first.events[0]!.frame), { type: 'event', topic, id: ids[3], data: 3 });
      const next = await b.broker.history(key, ids[4]!, 2);
      assert.deepEqual([next.events.map((e) => e.id), next.recovered], [ids.slice(5, 7), true]);
      const before = await b.broker.history(key, ids[1]!, 2);
      assert.deepEqual([before.events.map((e) => e.id), before.recovered], [ids.slice(3, 5), false]);

      const newest = await b.broker.history(key, undefined, 2);
      assert.deepEqual([newest.events.map((e) => e.id), newest.recovered], [ids.slice(6), false], 'three kept events were left out');
      const kept = await b.broker.history(key, undefined, 100);
      assert.deepEqual([kept.events.map((e) => e.id), kept.recovered], [ids.slice(3), false], 'events of the last ttl were trimmed by size');

      const small = ownedBy(owner, 'small');
      const few: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await a.broker.publish('default', durable(small, i));
        few.push(r.ok ? r.id! : '');
      }
      const all = await b.broker.history(topicKey('default', small), undefined, 3);
      assert.deepEqual([all.events.map((e) => e.id), all.recovered], [few, !impl.startedNow]);
      const cut = await b.broker.history(topicKey('default', small), undefined, 2);
      assert.deepEqual([cut.events.map((e) => e.id), cut.recovered], [few.slice(1), false]);
      assert.deepEqual(await b.broker.history(topicKey('default', ownedBy(owner, 'none')), undefined, 10), { events: [], recovered: !impl.startedNow });
    });
  });
}

describe('Redis history keys (standalone)', () => {
  test('a position mark stands at or above the stream\'s newest id, even one ahead of the clock, and moves the stream\'s last id up to it', async () => {
    const [a] = await redisPair('standalone', { WS_POSITION_REFRESH_MS: '1000' });
    const server = await servers.get('standalone')!;
    const redis = new Redis(server.url);
    try {
      const marks = (): Delivery[] => (a as Node).got.filter((d) => d.frame.startsWith('{"type":"position"'));
      const lastGenerated = async (stream: string): Promise<string> => {
        const info = (await redis.xinfo('STREAM', stream)) as unknown[];
        return String(info[info.indexOf('last-generated-id') + 1]);
      };
      // A stream id a minute ahead of Redis's clock (stored directly, not published).
      const ahead = topicKey('default', 'mark-ahead');
      await a.broker.subscribe(ahead);
      const future = `${Date.now() + 60_000}-5`;
      await redis.xadd(topicRedisKeys(ahead).stream, future, 'h', '', 't', '');
      (a.broker as ShardBroker).sweep(Date.now() + 5000);
      await eventually(() => marks().length === 1);
      assert.equal(marks()[0]!.id, future, 'the newest id, not the clock');

      // An old stream: the mark is at the clock, and the stream's last id follows it.
      const old = topicKey('default', 'mark-old');
      await redis.xadd(topicRedisKeys(old).stream, `${Date.now() - 600_000}-0`, 'h', '', 't', '');
      await a.broker.subscribe(old);
      // The node's splice of the topic starts at Redis's clock - 1 ms, read
      // by the subscribe: a mark asked in that same ms is no newer and is
      // dropped (the next one moves the topic on). Asked once Redis's
      // clock is past every reading the subscribe can have taken.
      const redisMs = async (): Promise<number> => {
        const [s, us] = await redis.time();
        return Number(s) * 1000 + Math.floor(Number(us) / 1000);
      };
      const after = await redisMs();
      while (await redisMs() <= after) await new Promise((r) => setTimeout(r, 1));
      (a.broker as ShardBroker).sweep(Date.now() + 5000);
      await eventually(() => marks().length === 2);
      const m = marks()[1]!;
      assert.ok((compareEventIdStrings(m.id!, `${Date.now() - 10_000}-0`) ?? 0) > 0, `a mark at the clock: ${m.id}`);
      assert.equal(await lastGenerated(topicRedisKeys(old).stream), m.id, 'a later XADD is above the mark whatever the clock');
    } finally {
      redis.disconnect();
    }
  });

  test('a stream and its floor expire keep ms after the later of the clock and the id; a position past a floor that outlived its stream is now', async () => {
    const [a] = await redisPair('standalone');
    const server = await servers.get('standalone')!;
    const redis = new Redis(server.url);
    try {
      const keep = config.historyTtlMs + Math.max(config.historyTtlMs, 3_600_000);
      // An id an hour ahead of the clock (a clock that stepped back, or a master behind its predecessor): the next is after it.
      const ahead = topicKey('default', 'ahead');
      const k = topicRedisKeys(ahead);
      const future = Date.now() + 3_600_000;
      await redis.xadd(k.stream, `${future}-0`, 'h', '', 't', '');
      const r = await a.broker.publish('default', durable('ahead', 1));
      const idMs = Number(r.ok ? r.id!.split('-')[0] : NaN);
      assert.ok(idMs >= future, `id ${r.ok ? r.id : ''} after ${future}-0`);
      const at = Number(await redis.call('PEXPIRETIME', k.stream));
      assert.ok(at >= idMs + keep && at <= idMs + keep + 1000, `the stream expires at ${at}, keep after the id: ${idMs + keep}`);
      // Nothing was trimmed: no floor yet. A publish trimming by length sets one, which expires with the stream.
      assert.equal(Number(await redis.call('PEXPIRETIME', k.floor)), -2);
      for (let i = 0; i < 6; i++) await a.broker.publish('default', durable('ahead', i));
      assert.equal(Number(await redis.call('PEXPIRETIME', k.floor)), Number(await redis.call('PEXPIRETIME', k.stream)));

      // A read that trims by age sets the floor: it expires with its stream, not keep after the read.
      const [short] = await redisPair('standalone', { WS_HISTORY_TTL_MS: '1000' });
      const aged = topicKey('default', 'aged');
      const ak = topicRedisKeys(aged);
      const first = await short.broker.publish('default', durable('aged', 1));
      await new Promise((r) => setTimeout(r, 1500));
      const streamAt = Number(await redis.call('PEXPIRETIME', ak.stream));
      const read = await short.broker.history(aged, '0-0');
      assert.deepEqual([read.events.length, read.recovered], [0, false], 'the event expired and was trimmed');
      assert.equal(await redis.get(ak.floor), first.ok ? first.id : '');
      const floorAt = Number(await redis.call('PEXPIRETIME', ak.floor));
      assert.ok(Math.abs(floorAt - streamAt) <= 5, `the floor expires at ${floorAt}, the stream at ${streamAt}`);

      // A floor two hours old with no stream (Redis evicted or lost the stream alone).
      const gone = topicKey('default', 'gone');
      const g = topicRedisKeys(gone);
      await redis.set(g.floor, `${Date.now() - 7_200_000}-0`, 'PX', 60_000);
      const before = Date.now();
      const position = await a.broker.subscribe(gone);
      a.broker.unsubscribe(gone);
      assert.ok(Number(String(position).split('-')[0]) >= before - 1000, `position ${position} is about now`);
      assert.deepEqual(await a.broker.history(gone, position), { events: [], recovered: true });
    } finally {
      redis.disconnect();
    }
  });
});

describe('embedded broker when the owner shard is gone', () => {
  test('publishes to its topics resolve unavailable and subscribes reject; its other topics still work', async () => {
    const [a, , ch] = pair();
    ch.port2.close();
    await settle();
    const lost = ownedBy(1, 'gone');
    const kept = ownedBy(0, 'kept');
    assert.deepEqual(await a.broker.publish('default', durable(lost, 1)), { ok: false, reason: 'unavailable' });
    await assert.rejects(a.broker.subscribe(topicKey('default', lost)));
    await assert.rejects(a.broker.history(topicKey('default', lost), '0-0'));
    const ok = await a.broker.publish('default', durable(kept, 1));
    assert.equal(ok.ok, true);
  });
});

describe('embedded broker: a topic is owned by the shard that touched it first', () => {
  test('the first subscriber\'s shard owns it: its publishes are answered inline, the other shard\'s cross to it, one order for both', async () => {
    const table = new TopicOwners(2);
    const [a, b] = pair(config, table);
    const topic = 'first-touch';
    const key = topicKey('default', topic);
    assert.equal(table.peek(key), -1, 'nobody owns it yet');
    await b.broker.subscribe(key);
    assert.equal(table.peek(key), 1, 'shard 1 joined it first');
    await a.broker.subscribe(key);
    assert.equal(table.peek(key), 1, 'a later join does not move it');
    // Shard 1's publish is its own topic's: done runs before publishThen returns.
    let inline: PublishResult | undefined;
    (b.broker as MeshBroker).publishThen('default', durable(topic, 'b1'), (res) => { inline = res; });
    assert.equal(inline?.ok, true, 'the owner answers inline');
    // Shard 0's publish crosses to shard 1; the two shards' publishes interleave.
    const acks = await Promise.all([a.broker.publish('default', durable(topic, 'a1')), b.broker.publish('default', durable(topic, 'b2')),
      a.broker.publish('default', durable(topic, 'a2'))]);
    assert.ok(acks.every((r) => r.ok));
    await eventually(() => a.got.length === 4 && b.got.length === 4);
    const order = (n: Node): string[] => n.got.map((d) => `${d.id}`);
    assert.deepEqual(order(a), order(b), 'both shards got one order');
    const ids = order(a);
    assert.deepEqual([...ids].sort((x, y) => compareEventIdStrings(x, y) ?? 0), ids, 'in id order');
    const read = await a.broker.history(key, '0-0');
    assert.deepEqual(read.events.map((e) => e.id), ids, 'the owner kept them, read from the other shard');
  });

  test('two shards joining an untouched topic at once agree on one owner', async () => {
    const table = new TopicOwners(2);
    const [a, b] = pair(config, table);
    for (let i = 0; i < 50; i++) {
      const key = topicKey('default', `race-join-${i}`);
      // Both claim in the same turn of the event loop, before any message between them.
      const joins = i % 2 === 0 ? [a.broker.subscribe(key), b.broker.subscribe(key)] : [b.broker.subscribe(key), a.broker.subscribe(key)];
      await Promise.all(joins);
      assert.equal(table.peek(key), i % 2 === 0 ? 0 : 1, 'the first claim won');
    }
    // Every topic's events reach both shards in one order, whichever owns it.
    for (let i = 0; i < 50; i++) {
      await Promise.all([a.broker.publish('default', durable(`race-join-${i}`, 'x')), b.broker.publish('default', durable(`race-join-${i}`, 'y'))]);
    }
    await eventually(() => a.got.length === 100 && b.got.length === 100);
    const byTopic = (n: Node): string[] => n.got.map((d) => `${d.topic} ${d.id}`).sort();
    assert.deepEqual(byTopic(a), byTopic(b));
    assert.equal(new Set(byTopic(a)).size, 100, 'two distinct ids per topic');
  });
});

describe('embedded broker: publishThen to another shard\'s topic (the hot path, no promise)', () => {
  test('done gets the owner\'s id after the event reached this shard; unavailable when the owner goes away with the publish in flight, and at once after', async () => {
    const [a, b] = pair();
    const mesh = a.broker as MeshBroker;
    const topic = ownedBy(1, 'then');
    await a.broker.subscribe(topicKey('default', topic));
    const answers: { res: PublishResult; eventsBefore: number }[] = [];
    await new Promise<void>((resolve) => {
      mesh.publishThen('default', durable(topic, 1), (res) => { answers.push({ res, eventsBefore: a.got.length }); resolve(); });
      assert.equal(answers.length, 0, 'another shard\'s topic answers later, not inline');
      (a.broker as MeshBroker).flush();
    });
    const first = answers[0]!;
    assert.equal(first.res.ok, true);
    assert.equal(first.eventsBefore, 1, 'the event arrived before its ack');
    assert.equal(a.got[0]!.id, first.res.ok ? first.res.id : undefined);
    assert.deepEqual(b.got, [], 'shard 1 has no subscriber');

    // In flight when the owner goes away: answered unavailable, once.
    let late: PublishResult | undefined;
    let calls = 0;
    mesh.publishThen('default', durable(topic, 2), (res) => { late = res; calls++; });
    (b.broker as MeshBroker).close();
    await settle();
    assert.deepEqual(late, { ok: false, reason: 'unavailable' });
    assert.equal(calls, 1);
    let after: PublishResult | undefined;
    mesh.publishThen('default', durable(topic, 3), (res) => { after = res; });
    assert.deepEqual(after, { ok: false, reason: 'unavailable' }, 'with the owner gone, done runs before publishThen returns');
  });
});
