/**
 * keepAlive against a real redis-server: a connection that ioredis ends
 * without being asked (here: a retry strategy that gives up, as ioredis's
 * Sentinel connector does in a failover race) is connected again; one the
 * caller closes stays closed; a connection that stops answering without
 * closing is dropped and made again by the heartbeat.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { keepAlive } from '../src/index.ts';
import { type RedisServer, startRedis } from '../src/testing.ts';

let redis: RedisServer;
before(async () => {
  redis = await startRedis();
});
after(() => redis.stop());

async function waitFor(check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('an end nobody asked for is connected again; disconnect() and quit() stay closed', async () => {
  // retryStrategy null: ioredis ends the connection at its first loss, for good.
  const c = keepAlive(new Redis(redis.url, { connectionName: 'keep-alive-a', retryStrategy: () => null }));
  const ends: number[] = [];
  c.on('end', () => ends.push(Date.now()));
  try {
    await waitFor(() => c.status === 'ready');
    await redis.cli('CLIENT', 'KILL', 'SKIPME', 'yes');
    await waitFor(() => ends.length === 1);
    await waitFor(() => c.status === 'ready');
    assert.equal(await c.ping(), 'PONG');
    // Asked to close: it stays closed.
    c.disconnect();
    await waitFor(() => c.status === 'end');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(c.status, 'end');
    assert.equal(ends.length, 2);
  } finally {
    c.disconnect();
  }
  const q = keepAlive(new Redis(redis.url, { connectionName: 'keep-alive-b', retryStrategy: () => null }));
  await waitFor(() => q.status === 'ready');
  await q.quit();
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(q.status, 'end');
  // A reconnect the caller asked for is not a close: the connection comes back.
  const r = keepAlive(new Redis(redis.url, { connectionName: 'keep-alive-c' }));
  try {
    await waitFor(() => r.status === 'ready');
    r.disconnect(true);
    await waitFor(() => r.status === 'ready');
    assert.equal(await r.ping(), 'PONG');
  } finally {
    r.disconnect();
  }
});

test('a connection that stops answering without closing is dropped and made again', async () => {
  const c = keepAlive(new Redis(redis.url, { connectionName: 'keep-alive-d', commandTimeout: 300 }), 100);
  let closes = 0;
  c.on('close', () => void closes++);
  try {
    await waitFor(() => c.status === 'ready');
    // The server stops answering clients for 1.5 s (the socket stays open): the heartbeat's PING times out.
    await redis.cli('CLIENT', 'PAUSE', '1500', 'ALL');
    await waitFor(() => closes >= 1, 5000);
    await waitFor(() => c.status === 'ready', 10_000);
    assert.equal(await c.ping(), 'PONG');
  } finally {
    c.disconnect();
  }
});
