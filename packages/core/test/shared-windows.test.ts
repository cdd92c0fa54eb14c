import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { MemoryWindowStore, SharedWindowTable } from '../src/index.ts';

const T0 = 1_796_000_000_000;

// The clock may step back by up to one window behind the latest time seen
// (shards' clocks differ a little), as MemoryWindowStore's contract says.
// Further back, the memory store's answer depends on when its sweep last
// ran (a key it dropped starts afresh; the table may still hold it), which
// neither store promises anything about.
test('every answer is the memory store\'s, for any keys, hits and clock (steps back of up to a window included)', () => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 60_000 }),
    fc.integer({ min: 0, max: 20 }),
    fc.array(fc.record({ key: fc.integer({ min: 0, max: 5 }), hits: fc.integer({ min: 0, max: 4 }), dt: fc.integer({ min: -3000, max: 40_000 }) }),
      { minLength: 1, maxLength: 200 }),
    (windowMs, limit, steps) => {
      const table = new SharedWindowTable(new SharedArrayBuffer(SharedWindowTable.bytes(256)), 256, windowMs, 0);
      const store = new MemoryWindowStore();
      let now = T0;
      let latest = T0;
      for (const s of steps) {
        now = Math.max(latest - windowMs, now + s.dt);
        latest = Math.max(latest, now);
        const key = `ip:10.0.0.${s.key}`;
        const mine = table.hit(key, s.hits, limit, now);
        const [theirs] = store.settleNow([{ key, hits: s.hits }], limit, windowMs, now);
        assert.deepEqual(mine, theirs);
      }
    },
  ), { numRuns: 1000 });
});

test('a full table answers undefined and counts nothing; expired slots are taken again', () => {
  const slots = 64;
  const table = new SharedWindowTable(new SharedArrayBuffer(SharedWindowTable.bytes(slots)), slots, 1000, 0);
  for (let k = 0; k < slots; k++) assert.notEqual(table.hit(`k${k}`, 1, 10, T0), undefined);
  assert.equal(table.size(T0), slots);
  assert.equal(table.hit('one more', 1, 10, T0), undefined);
  assert.equal(table.size(T0), slots);
  // Three buckets later every key has left the window: their slots are free again.
  assert.deepEqual(table.hit('one more', 1, 10, T0 + 3000), { count: 1, retryAfterMs: 0, demand: 1 });
  assert.equal(table.size(T0 + 3000), 1);
});

test('threads hitting one key at once are each counted once: the node-wide count is exact', async () => {
  const slots = 1024;
  const buffer = new SharedArrayBuffer(SharedWindowTable.bytes(slots));
  const threads = 4;
  const each = 20_000;
  const results = await Promise.all(Array.from({ length: threads }, (_, holder) => new Promise<number>((resolve, reject) => {
    const w = new Worker(new URL('./fixtures/shared-window-hitter.mjs', import.meta.url), { workerData: { buffer, slots, holder, each, now: T0 } });
    w.once('message', resolve);
    w.once('error', reject);
  })));
  assert.deepEqual(results, Array(threads).fill(0));
  const table = new SharedWindowTable(buffer, slots, 3_600_000, 99);
  assert.equal(table.hit('shared', 0, 1e9, T0)!.count, (threads * each) / 2);
  for (let h = 0; h < threads; h++) assert.equal(table.hit(`ip:${h}`, 0, 1e9, T0)!.count, each / 2);
});

test('a lock left by a thread that died is released by its holder id, and only by it', () => {
  const buffer = new SharedArrayBuffer(SharedWindowTable.bytes(64));
  const i32 = new Int32Array(buffer);
  Atomics.store(i32, 0, 3 + 1); // thread 3 died inside
  const table = new SharedWindowTable(buffer, 64, 1000, 0);
  assert.equal(table.releaseIfHeldBy(2), false);
  assert.equal(table.releaseIfHeldBy(3), true);
  assert.deepEqual(table.hit('k', 1, 5, T0), { count: 1, retryAfterMs: 0, demand: 1 });
});
