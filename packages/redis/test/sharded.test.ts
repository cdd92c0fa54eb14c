/**
 * ShardedSubscriptions against a real redis-server (SSUBSCRIBE works on a
 * standalone Redis 7 too): the cluster client is a stand-in that only maps
 * slots to that server. A reconnect's callback that throws is reported
 * through onError, never left as an unhandled rejection (which ends a shard).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
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
  const fakeCluster = { slots: new Proxy([], { get: (_t, k) => (typeof k === 'string' && /^\d+$/.test(k) ? [node] : undefined) }) };
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

async function waitFor(check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}
