/**
 * ShardedSubscriptions against a real redis-server (SSUBSCRIBE works on a
 * standalone Redis 7 too): the cluster client is a stand-in that only maps
 * slots to that server. A reconnect's callback that throws is reported
 * through onError, never left as an unhandled rejection (which ends a shard).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import { ShardedSubscriptions, type RedisClient } from '../src/index.ts';
import { type RedisServer, startRedis } from '../src/testing.ts';

let redis: RedisServer;
before(async () => {
  redis = await startRedis();
});
after(() => redis.stop());

test('a throwing onReady after a reconnect goes to onError; the channel is subscribed again and still delivers', async () => {
  const node = `127.0.0.1:${redis.port}`;
  const fakeCluster = Object.assign(new EventEmitter(), {
    slots: new Proxy([], { get: (_t, k) => (typeof k === 'string' && /^\d+$/.test(k) ? [node] : undefined) }),
    refreshSlotsCache: () => undefined,
  });
  const subs = new ShardedSubscriptions(fakeCluster as unknown as RedisClient, { connectionName: 'sharded-test', retryStrategy: () => 50 });
  const got: string[] = [];
  subs.onMessage((_ch, payload) => got.push(payload));
  const errors: unknown[] = [];
  let readies = 0;
  subs.onReady(() => {
    readies++;
    throw new Error('catch-up failed');
  });
  subs.onError((err) => errors.push(err));
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown): void => void unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  const pub = new Redis(redis.url);
  try {
    await subs.subscribe('sluice:t:{a}');
    await pub.spublish('sluice:t:{a}', 'one');
    await waitFor(() => got.includes('one'));
    await redis.cli('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await waitFor(() => errors.length === 1);
    assert.equal(readies, 1);
    assert.match(String(errors[0]), /catch-up failed/);
    await pub.spublish('sluice:t:{a}', 'two');
    await waitFor(() => got.includes('two'));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    pub.disconnect();
    subs.disconnect();
  }
});

test('a slot that has another master after a refresh (a failover): its channel is subscribed there, onReady fires, the old connection closes', async () => {
  const other = await startRedis();
  let node = `127.0.0.1:${redis.port}`;
  const fakeCluster = Object.assign(new EventEmitter(), {
    slots: new Proxy([], { get: (_t, k) => (typeof k === 'string' && /^\d+$/.test(k) ? [node] : undefined) }),
    refreshSlotsCache: () => undefined,
  });
  const subs = new ShardedSubscriptions(fakeCluster as unknown as RedisClient, { connectionName: 'sharded-move', retryStrategy: () => 50 });
  const got: string[] = [];
  subs.onMessage((_ch, payload) => got.push(payload));
  let readies = 0;
  subs.onReady(() => void readies++);
  const oldPub = new Redis(redis.url);
  const newPub = new Redis(other.url);
  try {
    await subs.subscribe('sluice:t:{m}');
    await oldPub.spublish('sluice:t:{m}', 'before');
    await waitFor(() => got.includes('before'));
    // A refresh that changes nothing moves nothing.
    fakeCluster.emit('refresh');
    assert.equal(readies, 0);
    node = `127.0.0.1:${other.port}`;
    fakeCluster.emit('refresh');
    await waitFor(() => readies === 1);
    await newPub.spublish('sluice:t:{m}', 'after');
    await waitFor(() => got.includes('after'));
    // The old master's connection is gone: nothing of ours is left on it.
    for (let i = 0; /name=sharded-move/.test(await redis.cli('CLIENT', 'LIST')); i++) {
      assert.ok(i < 100, 'the old master still has our connection after 2 s');
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.match(await other.cli('CLIENT', 'LIST'), /name=sharded-move/);
    assert.ok(subs.up);
  } finally {
    oldPub.disconnect();
    newPub.disconnect();
    subs.disconnect();
    await other.stop();
  }
});

async function waitFor(check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}
