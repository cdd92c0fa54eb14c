import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { RedisHealth, type RedisClient, type RedisState } from '../src/index.ts';

/** A connection's events without a connection: ioredis emits these for Redis and Cluster alike. */
function fakeClient(status = 'connecting'): EventEmitter & { status: string } {
  return Object.assign(new EventEmitter(), { status });
}

test('states follow the connection: connecting, up, down (at start or an outage), up again; listeners hear changes only', () => {
  const c = fakeClient();
  const h = new RedisHealth(c as unknown as RedisClient);
  const seen: [RedisState, RedisState][] = [];
  h.onChange((s, prev) => seen.push([s, prev]));
  assert.equal(h.state, 'connecting');
  c.emit('close');
  c.emit('close');
  assert.equal(h.state, 'down');
  assert.equal(h.outages, 0, 'unreachable at start is not an outage');
  c.emit('ready');
  assert.equal(h.up, true);
  c.emit('close');
  c.emit('end');
  assert.equal(h.outages, 1);
  c.emit('ready');
  assert.deepEqual(seen, [['down', 'connecting'], ['up', 'down'], ['down', 'up'], ['up', 'down']]);
  assert.equal(h.everUp, true);
});

test('a client already ready starts up; whenUp resolves at up or after its wait', async () => {
  assert.equal(new RedisHealth(fakeClient('ready') as unknown as RedisClient).up, true);
  const h = new RedisHealth();
  let fire: () => void = () => {};
  const waited = h.whenUp(3000, { set: (fn) => (fire = fn) });
  let done = false;
  void waited.then(() => (done = true));
  await Promise.resolve();
  assert.equal(done, false);
  h.set('up');
  await waited;
  const never = new RedisHealth();
  const timedOut = never.whenUp(3000, { set: (fn) => (fire = fn) });
  fire();
  await timedOut;
  assert.equal(never.up, false);
});

test('waits leave no listener behind, whether Redis came up or the wait ran out', async () => {
  const h = new RedisHealth();
  const before = h.listenerCount;
  const fires: (() => void)[] = [];
  const cleared: unknown[] = [];
  const timers = { set: (fn: () => void) => fires.push(fn), clear: (x: unknown) => cleared.push(x) };
  const waits = Array.from({ length: 100 }, () => h.whenUp(3000, timers));
  assert.equal(h.listenerCount, before + 100);
  for (const f of fires.slice(0, 50)) f();
  await Promise.all(waits.slice(0, 50));
  assert.equal(h.listenerCount, before + 50, 'timed-out waits took their listener away');
  h.set('up');
  await Promise.all(waits);
  assert.equal(h.listenerCount, before, 'waits that saw up took theirs away');
  assert.equal(cleared.length, 100, 'and every timer was cleared');
});
