import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import { MemoryWindowStore, windowBucket, type WindowHit, type WindowStore } from '@sluice/core';
import { RedisWindowStore } from '../src/window-store.ts';
import { startRedis, startRedisCluster, type RedisCluster, type RedisServer } from '../src/testing.ts';

// A bucket boundary for every window used with it.
const T0 = 1_732_900_000_000;

interface Fixture {
  readonly store: WindowStore;
  /**
   * Makes `key`, last written at real time `now` with `windowMs`, old enough
   * to be dropped (memory: the sweep, three windows on; Redis: real time,
   * past the TTL), and says whether anything of it is still held.
   */
  heldAfterExpiry(key: string, windowMs: number, now: number): Promise<boolean>;
}

/** The same contract, whatever the store. */
function contract(fixture: () => Fixture): void {
  test('hits add up across settles within a bucket, per key, and so does demand', async () => {
    const { store } = fixture();
    assert.deepEqual(await store.settle([{ key: 'add-a', hits: 3 }], 10, 1000, T0 + 100), [{ count: 3, retryAfterMs: 0, demand: 3 }]);
    assert.deepEqual(
      await store.settle([{ key: 'add-a', hits: 4, demand: 9 }, { key: 'add-b', hits: 1 }], 10, 1000, T0 + 200),
      [{ count: 7, retryAfterMs: 0, demand: 12 }, { count: 1, retryAfterMs: 0, demand: 1 }],
    );
    assert.deepEqual(await store.settle([], 10, 1000, T0 + 300), []);
  });

  test('the estimate decays across the bucket boundary as the math says', async () => {
    const { store } = fixture();
    await store.settle([{ key: 'decay', hits: 100 }], 1000, 1000, T0 + 500);
    const seen: number[] = [];
    for (const at of [999, 1000, 1250, 1900, 1999, 2000]) seen.push((await store.settle([{ key: 'decay', hits: 0 }], 1000, 1000, T0 + at))[0]!.count);
    assert.deepEqual(seen, [100, 100, 75, 10, 1, 0]);
  });

  test('retryAfterMs is 0 while there is room, and the time until a hit fits when full', async () => {
    const { store } = fixture();
    assert.equal((await store.settle([{ key: 'full', hits: 9 }], 10, 1000, T0 + 300))[0]!.retryAfterMs, 0);
    assert.deepEqual(await store.settle([{ key: 'full', hits: 1 }], 10, 1000, T0 + 300), [{ count: 10, retryAfterMs: 800, demand: 10 }]);
    assert.ok((await store.settle([{ key: 'full', hits: 0 }], 10, 1000, T0 + 1099))[0]!.retryAfterMs > 0);
    assert.deepEqual(await store.settle([{ key: 'full', hits: 0 }], 10, 1000, T0 + 1100), [{ count: 9, retryAfterMs: 0, demand: 9 }]);
    // Full because of the previous bucket: 5 + ceil(10 * 0.7) = 12; 5 + ceil(10 * (700 - t) / 1000) <= 9 from t = 300.
    assert.deepEqual(await store.settle([{ key: 'full', hits: 5 }], 10, 1000, T0 + 1300), [{ count: 12, retryAfterMs: 300, demand: 12 }]);
  });

  test('keys are independent, whatever characters they hold', async () => {
    const { store } = fixture();
    const keys = ['ind-a', 'ind-b', 'ind-{x}', 'ind-}{', 'ind-%7B', 'ind-{', '}', '', 'ind-é日本'];
    const states = await store.settle(keys.map((key, i) => ({ key, hits: i + 1 })), 100, 1000, T0);
    assert.deepEqual(states.map((s) => s.count), keys.map((_, i) => i + 1));
    const again = await store.settle(keys.map((key) => ({ key, hits: 0 })), 100, 1000, T0 + 1);
    assert.deepEqual(again.map((s) => s.count), keys.map((_, i) => i + 1));
  });

  test('a settle a little late (a shard whose clock is behind) counts in its own bucket', async () => {
    const { store } = fixture();
    await store.settle([{ key: 'late', hits: 10 }], 100, 1000, T0 + 1100);
    assert.equal((await store.settle([{ key: 'late', hits: 5 }], 100, 1000, T0 + 600))[0]!.count, 5);
    assert.equal((await store.settle([{ key: 'late', hits: 0 }], 100, 1000, T0 + 1100))[0]!.count, 15);
  });

  test('bad arguments reject', async () => {
    const { store } = fixture();
    await assert.rejects(store.settle([{ key: 'bad', hits: 1 }], 10, 0, T0), RangeError);
    await assert.rejects(store.settle([{ key: 'bad', hits: -1 }], 10, 1000, T0), RangeError);
    await assert.rejects(store.settle([{ key: 'bad', hits: 2, demand: 1 }], 10, 1000, T0), RangeError);
  });

  test('a key unused for two windows is dropped', async () => {
    const f = fixture();
    const now = Date.now();
    await f.store.settle([{ key: 'expiring', hits: 3 }], 10, 100, now);
    assert.equal(await f.heldAfterExpiry('expiring', 100, now), false);
  });
}

/** A fresh memory store per test. */
function memoryFixture(): Fixture {
  const store = new MemoryWindowStore();
  return {
    store,
    async heldAfterExpiry(_key, windowMs, now) {
      assert.equal(store.size, 1);
      store.sweep(now + 3 * windowMs);
      return store.size > 0;
    },
  };
}

describe('MemoryWindowStore: the WindowStore contract', () => {
  contract(memoryFixture);
});

function redisFixture(store: RedisWindowStore, client: Redis | Cluster): Fixture {
  return {
    store,
    async heldAfterExpiry(key, windowMs, now) {
      const b = windowBucket(now, windowMs);
      const ttl = await client.pttl(store.keyOf(key, b));
      assert.ok(ttl > 0 && ttl <= 2 * windowMs - (now - b * windowMs), `pttl ${ttl}`);
      // Past the TTL in Redis's clock (at most two windows), with a margin.
      await sleep(2 * windowMs + 100);
      return (await client.exists(store.keyOf(key, b), store.keyOf(key, b - 1))) > 0;
    },
  };
}

/** A small deterministic PRNG (mulberry32): the same sequence for every store and every run. */
function prng(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/**
 * Random sequences of settles, each run against a fresh memory store and the
 * Redis store (fresh keys), answer by answer. Nows move forward, each settle
 * possibly late by less than a window (as from a shard whose clock is behind).
 */
async function sameAnswers(redis: RedisWindowStore, runs: number, tag: string): Promise<void> {
  for (let run = 0; run < runs; run++) {
    const seed = 0x5eed + run;
    const rand = prng(seed);
    const memory = new MemoryWindowStore();
    const limit = 1 + rand(20);
    // At least a second: a run must end before Redis's TTLs (real time) drop a bucket it still reads.
    const windowMs = 1000 + rand(59_000);
    const keys = [`${tag}-${run}-a`, `${tag}-${run}-b`, `${tag}-${run}-{c}`];
    let clock = T0 + rand(windowMs);
    const steps = 10 + rand(40);
    for (let step = 0; step < steps; step++) {
      clock += rand(windowMs / 2);
      const now = clock - rand(windowMs);
      const batch: WindowHit[] = [];
      for (const key of keys) {
        if (rand(3) === 0) continue;
        const hits = rand(2 * limit);
        batch.push(rand(2) === 0 ? { key, hits } : { key, hits, demand: hits + rand(5) });
      }
      const want = await memory.settle(batch, limit, windowMs, now);
      const got = await redis.settle(batch, limit, windowMs, now);
      assert.deepEqual(got, want, `seed ${seed}, step ${step}: settle(${JSON.stringify(batch)}, ${limit}, ${windowMs}, ${now})`);
    }
  }
}

describe('RedisWindowStore on a standalone Redis', () => {
  let server: RedisServer;
  let client: Redis;
  let store: RedisWindowStore;

  before(async () => {
    server = await startRedis();
    client = new Redis(server.url, { enableOfflineQueue: true, maxRetriesPerRequest: 0 });
    store = new RedisWindowStore(client, { prefix: 'sluice:win:test:' });
  });

  after(async () => {
    client.disconnect();
    await server.stop();
  });

  describe('the WindowStore contract', () => {
    contract(() => redisFixture(store, client));
  });

  test('the same answers as the memory store, for random sequences of settles', async () => {
    await sameAnswers(store, 150, 'same');
  });

  test('one pipelined script call per key per settle, counted', async () => {
    await store.settle([{ key: 'warm', hits: 1 }], 10, 1000, T0);
    const before = store.commands;
    const calls = await server.cli('info', 'commandstats');
    const evalshaBefore = Number(/cmdstat_evalsha:calls=(\d+)/.exec(calls)?.[1] ?? 0);
    await store.settle(['p1', 'p2', 'p3', 'p4'].map((key) => ({ key, hits: 2 })), 10, 1000, T0);
    assert.equal(store.commands - before, 4);
    const evalshaAfter = Number(/cmdstat_evalsha:calls=(\d+)/.exec(await server.cli('info', 'commandstats'))?.[1] ?? 0);
    assert.equal(evalshaAfter - evalshaBefore, 4);
  });

  test('the two buckets of a key share a hash tag, and a key cannot move it', () => {
    assert.equal(store.keyOf('tenant-1', 42), 'sluice:win:test:{tenant-1}:42');
    assert.equal(store.keyOf('a}b{c%', 42), 'sluice:win:test:{a%7Db%7Bc%25}:42');
  });

  test('after SCRIPT FLUSH the script is sent again (EVAL) and the answers go on', async () => {
    await store.settle([{ key: 'flush', hits: 1 }], 10, 1000, T0);
    await server.cli('script', 'flush');
    const before = store.commands;
    assert.deepEqual(await store.settle([{ key: 'flush', hits: 1 }, { key: 'flush-2', hits: 1 }], 10, 1000, T0 + 1), [
      { count: 2, retryAfterMs: 0, demand: 2 },
      { count: 1, retryAfterMs: 0, demand: 1 },
    ]);
    assert.equal(store.commands - before, 4, 'EVALSHA, NOSCRIPT, then EVAL, per key');
    assert.deepEqual(await store.settle([{ key: 'flush', hits: 1 }], 10, 1000, T0 + 2), [{ count: 3, retryAfterMs: 0, demand: 3 }]);
  });
});

describe('RedisWindowStore when Redis fails', () => {
  let server: RedisServer;
  let client: Redis;

  before(async () => {
    server = await startRedis();
    // As createRedisClient configures it: fail at once rather than queue.
    client = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50, lazyConnect: true });
    await client.connect();
  });

  after(async () => {
    client.disconnect();
    await server.stop();
  });

  test('a Redis that does not answer rejects the settle after timeoutMs', async () => {
    const store = new RedisWindowStore(client, { timeoutMs: 100 });
    await store.settle([{ key: 'paused', hits: 1 }], 10, 1000, T0);
    await server.cli('client', 'pause', '1000', 'all');
    try {
      await assert.rejects(store.settle([{ key: 'paused', hits: 1 }], 10, 1000, T0), /no answer from Redis in 100 ms/);
    } finally {
      await server.cli('client', 'unpause');
    }
  });

  test('a Redis that is down rejects the settle', async () => {
    const store = new RedisWindowStore(client);
    await server.stop();
    await assert.rejects(store.settle([{ key: 'down', hits: 1 }, { key: 'down-2', hits: 1 }], 10, 1000, T0));
  });
});

describe('RedisWindowStore on a 3-master Redis Cluster', () => {
  let cluster: RedisCluster;
  let client: Cluster;
  let store: RedisWindowStore;

  before(async () => {
    cluster = await startRedisCluster();
    client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { enableAutoPipelining: true });
    store = new RedisWindowStore(client);
  });

  after(async () => {
    client.disconnect();
    await cluster.stop();
  });

  describe('the WindowStore contract', () => {
    contract(() => redisFixture(store, client));
  });

  test('one settle spreads over every master and answers every key', async () => {
    const spread = new RedisWindowStore(client, { prefix: 'sluice:spread:' });
    const keys = Array.from({ length: 12 }, (_, i) => `spread-${i}`);
    const states = await spread.settle(keys.map((key, i) => ({ key, hits: i + 1 })), 100, 1000, T0);
    assert.deepEqual(states.map((s) => s.count), keys.map((_, i) => i + 1));
    const perNode = await Promise.all(cluster.nodes.map(async (n) => (await n.cli('--scan', '--pattern', 'sluice:spread:*')).split('\n').filter((l) => l !== '').length));
    assert.equal(perNode.reduce((a, b) => a + b, 0), 12);
    assert.ok(perNode.every((n) => n > 0), `keys per master: ${perNode.join(', ')}`);
  });

  test('the same answers as the memory store, for random sequences of settles', async () => {
    await sameAnswers(store, 100, 'cluster-same');
  });
});
