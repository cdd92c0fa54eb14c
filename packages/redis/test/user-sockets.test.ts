// The user-socket stores (WS_MAX_USER_SOCKETS): memory (one node, the
// coordinator's) and Redis (the cluster's) keep one contract, checked here
// against both, the Redis one on a real redis-server.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { MemoryUserSockets, type UserSocketStore } from '@sluice/core';
import { RedisUserSockets } from '../src/user-sockets.ts';
import { startRedis, type RedisServer } from '../src/testing.ts';

const TTL = 300;
let seq = 0;
/** A holder id as the gateway makes them: its start time first. */
const holder = (name: string): string => `${Date.now()}.${name}.${seq++}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function contract(make: () => UserSocketStore): void {
  test('claims fit up to max per user, in order; a refused claim is not counted', async () => {
    const s = make();
    const h = holder('a');
    const now = Date.now();
    assert.deepEqual(await s.claim(h, ['t/@u1', 't/@u1', 't/@u2', 't/@u1', 't/@u1'], 3, now), [true, true, true, true, false]);
    assert.equal(await s.count('t/@u1', now), 3);
    assert.equal(await s.count('t/@u2', now), 1);
    assert.deepEqual(await s.claim(h, ['t/@u1'], 3, now), [false]);
    assert.equal(await s.count('t/@u1', now), 3, 'the refused claims added nothing');
  });

  test('a release frees places; releasing more than held leaves nothing behind', async () => {
    const s = make();
    const h = holder('b');
    const now = Date.now();
    await s.claim(h, ['t/@r', 't/@r'], 2, now);
    await s.release(h, new Map([['t/@r', 1]]), now);
    assert.equal(await s.count('t/@r', now), 1);
    assert.deepEqual(await s.claim(h, ['t/@r', 't/@r'], 2, now), [true, false]);
    await s.release(h, new Map([['t/@r', 5]]), now);
    assert.equal(await s.count('t/@r', now), 0);
    assert.deepEqual(await s.claim(h, ['t/@r', 't/@r'], 2, now), [true, true]);
  });

  test('holders count together while they beat; one silent past the TTL stops counting', async () => {
    const s = make();
    const [h1, h2] = [holder('c1'), holder('c2')];
    await s.claim(h1, ['t/@shared', 't/@shared'], 3, Date.now());
    await s.beat(h1, Date.now());
    assert.deepEqual(await s.claim(h2, ['t/@shared', 't/@shared'], 3, Date.now()), [true, false], 'h1 holds 2 of 3');
    // h2 keeps beating, h1 falls silent.
    for (let i = 0; i < 5; i++) {
      await sleep(TTL / 3);
      await s.beat(h2, Date.now());
    }
    await sleep(1100); // the Redis store reads the holders at most once a second
    await s.beat(h2, Date.now());
    assert.equal(await s.count('t/@shared', Date.now()), 1, 'only h2\'s socket counts');
    assert.deepEqual(await s.claim(h2, ['t/@shared', 't/@shared', 't/@shared'], 3, Date.now()), [true, true, false]);
  });

  test('a retired holder stops counting at once', async () => {
    const s = make();
    const [old, fresh] = [holder('g1'), holder('g2')];
    await s.claim(old, ['t/@ret', 't/@ret'], 2, Date.now());
    await s.retire(old);
    await sleep(1100); // the Redis store reads the holders at most once a second
    assert.deepEqual(await s.claim(fresh, ['t/@ret', 't/@ret', 't/@ret'], 2, Date.now()), [true, true, false]);
  });

  test('users of different tenants and free-text ids never share a count', async () => {
    const s = make();
    const h = holder('d');
    const now = Date.now();
    const keys = ['a/@x', 'b/@x', 'a/@x{y}', 'a/@x%7By%7D', 'a/@', 'a/@@'];
    assert.deepEqual(await s.claim(h, keys, 1, now), keys.map(() => true));
    for (const k of keys) assert.equal(await s.count(k, now), 1, k);
  });
}

describe('MemoryUserSockets', () => {
  contract(() => new MemoryUserSockets(TTL));

  test('drop forgets a holder at once', async () => {
    const s = new MemoryUserSockets(TTL);
    const h = holder('e');
    await s.claim(h, ['t/@d', 't/@d'], 2, Date.now());
    s.drop(h);
    assert.equal(await s.count('t/@d', Date.now()), 0);
  });
});

describe('RedisUserSockets on a real redis-server', () => {
  let redis: RedisServer;
  let client: Redis;
  before(async () => {
    redis = await startRedis();
    client = new Redis(redis.url);
  });
  after(async () => {
    client.disconnect();
    await redis.stop();
  });
  contract(() => new RedisUserSockets(client, TTL));

  test('a claim is one script per user, whatever the number of sockets claimed', async () => {
    const s = new RedisUserSockets(client, TTL);
    const h = holder('f');
    await s.claim(h, ['t/@warm'], 10, Date.now()); // reads the holders once
    const before = s.commands;
    await s.claim(h, ['t/@k1', 't/@k1', 't/@k1', 't/@k2'], 10, Date.now());
    assert.equal(s.commands - before, 1 + 2, 'one beat and one script per user');
  });
});
