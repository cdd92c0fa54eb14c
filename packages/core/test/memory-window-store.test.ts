import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { MemoryWindowStore, slidingWindowState, windowBucket } from '../src/memory-window-store.ts';

// A bucket boundary for a 1000 ms window (and for every window dividing it).
const T0 = 1_732_900_000_000;
const NONE = { current: 0, previous: 0 };
const pair = (current: number, previous: number) => ({ current, previous });

/** The estimate at `now` by the definition, for a key with `cur` hits in bucket `b0` and `prev` in the one before. */
function estimateAt(cur: number, prev: number, b0: number, w: number, now: number): number {
  const b = windowBucket(now, w);
  const current = b === b0 ? cur : b === b0 + 1 ? 0 : 0;
  const previous = b === b0 ? prev : b === b0 + 1 ? cur : 0;
  const elapsed = now - b * w;
  return current + Math.ceil((previous * (w - elapsed)) / w);
}

describe('slidingWindowState', () => {
  test('counts the current bucket and the part of the previous one still in the window, rounded up', () => {
    // 250 ms into the bucket: 3/4 of the previous bucket's 40 hits are still inside.
    assert.deepEqual(slidingWindowState(pair(10, 40), NONE, 100, 1000, T0 + 250), { count: 40, retryAfterMs: 0, demand: 0 });
    // Half of 7 is 3.5: counted as 4.
    assert.equal(slidingWindowState(pair(0, 7), NONE, 100, 1000, T0 + 500).count, 4);
    assert.equal(slidingWindowState(pair(5, 0), NONE, 100, 1000, T0 + 999).count, 5);
  });

  test('retryAfterMs is 0 while one more hit fits, and counts to the moment it does', () => {
    assert.equal(slidingWindowState(pair(9, 0), NONE, 10, 1000, T0).retryAfterMs, 0);
    // Full on the current bucket alone: wait for the next bucket, where these
    // 10 hits weigh (1000 - e)/1000 * 10 <= 9, i.e. e >= 100.
    assert.deepEqual(slidingWindowState(pair(10, 0), NONE, 10, 1000, T0 + 300), { count: 10, retryAfterMs: 700 + 100, demand: 0 });
    // Full because of the previous bucket: 5 + ceil(20 * 0.6) = 17 >= 10. Room for
    // 4 of the previous bucket: 20 * (600 - t) <= 4000, t >= 400.
    assert.deepEqual(slidingWindowState(pair(5, 20), NONE, 10, 1000, T0 + 400), { count: 17, retryAfterMs: 400, demand: 0 });
  });

  test('limit 0 never has room: the wait is until every hit has left the window', () => {
    assert.deepEqual(slidingWindowState(NONE, NONE, 0, 1000, T0 + 200), { count: 0, retryAfterMs: 1800, demand: 0 });
  });

  test('demand is estimated the same way as the count', () => {
    assert.equal(slidingWindowState(pair(10, 40), pair(30, 80), 100, 1000, T0 + 250).demand, 30 + 60);
  });

  test('property: retryAfterMs is the first ms at which the estimate is below the limit, with no new hits', () => {
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 40 }), fc.integer({ min: 1, max: 25 }),
      fc.integer({ min: 1, max: 300 }), fc.integer({ min: 0, max: 10_000 }),
      (cur, prev, limit, w, offset) => {
        const now = T0 + offset;
        const b0 = windowBucket(now, w);
        const { count, retryAfterMs } = slidingWindowState(pair(cur, prev), NONE, limit, w, now);
        assert.equal(count, estimateAt(cur, prev, b0, w, now));
        let t = 0;
        while (estimateAt(cur, prev, b0, w, now + t) >= limit) t++;
        assert.equal(retryAfterMs, t);
        assert.ok(t <= 2 * w);
      },
    ), { numRuns: 2000 });
  });
});

describe('MemoryWindowStore', () => {
  test('hits add up across settles within a bucket, per key', async () => {
    const s = new MemoryWindowStore();
    assert.deepEqual(await s.settle([{ key: 'a', hits: 3 }], 10, 1000, T0 + 100), [{ count: 3, retryAfterMs: 0, demand: 3 }]);
    assert.deepEqual(
      await s.settle([{ key: 'a', hits: 4, demand: 9 }, { key: 'b', hits: 1 }], 10, 1000, T0 + 200),
      [{ count: 7, retryAfterMs: 0, demand: 12 }, { count: 1, retryAfterMs: 0, demand: 1 }],
    );
  });

  test('the count decays across the bucket boundary as the estimate says', async () => {
    const s = new MemoryWindowStore();
    await s.settle([{ key: 'k', hits: 100 }], 1000, 1000, T0 + 500);
    for (const [at, count] of [[T0 + 999, 100], [T0 + 1000, 100], [T0 + 1250, 75], [T0 + 1900, 10], [T0 + 1999, 1], [T0 + 2000, 0]] as const) {
      assert.equal((await s.settle([{ key: 'k', hits: 0 }], 1000, 1000, at))[0]!.count, count, `at +${at - T0}`);
    }
  });

  test('a full window answers the wait, and a hit fits again exactly then', async () => {
    const s = new MemoryWindowStore();
    const [full] = await s.settle([{ key: 'k', hits: 10 }], 10, 1000, T0 + 300);
    assert.deepEqual(full, { count: 10, retryAfterMs: 800, demand: 10 });
    assert.ok((await s.settle([{ key: 'k', hits: 0 }], 10, 1000, T0 + 300 + 799))[0]!.retryAfterMs > 0);
    // 1 + ceil(10 * 0.9) = 10: full again, for the 100 ms the previous bucket takes to lose one more hit.
    assert.deepEqual(await s.settle([{ key: 'k', hits: 1 }], 10, 1000, T0 + 300 + 800), [{ count: 10, retryAfterMs: 100, demand: 10 }]);
  });

  test('a settle one window late (a shard whose clock is behind) counts in its own bucket', async () => {
    const s = new MemoryWindowStore();
    await s.settle([{ key: 'k', hits: 10 }], 100, 1000, T0 + 1100);
    // 500 ms earlier: the hits go to the previous bucket, and that bucket's window reads them.
    assert.equal((await s.settle([{ key: 'k', hits: 5 }], 100, 1000, T0 + 600))[0]!.count, 5);
    // Back at the present: 10 + ceil(5 * 0.9).
    assert.equal((await s.settle([{ key: 'k', hits: 0 }], 100, 1000, T0 + 1100))[0]!.count, 15);
  });

  test('a read (0 hits) stores nothing; old keys are swept', async () => {
    const s = new MemoryWindowStore();
    await s.settle([{ key: 'ghost', hits: 0 }], 10, 1000, T0);
    assert.equal(s.size, 0);
    await s.settle([{ key: 'a', hits: 1 }, { key: 'b', hits: 1 }], 10, 1000, T0);
    await s.settle([{ key: 'c', hits: 1 }], 10, 100, T0 + 150);
    assert.equal(s.size, 3);
    s.sweep(T0 + 2999);
    assert.equal(s.size, 2, 'c (100 ms buckets) is gone; a and b may still be read by a settle up to one window late');
    s.sweep(T0 + 3000);
    assert.equal(s.size, 0, 'every bucket three windows old');
  });

  test('settle sweeps by itself: keys written once do not accumulate', async () => {
    const s = new MemoryWindowStore();
    for (let i = 0; i < 10_000; i++) await s.settle([{ key: `ip-${i}`, hits: 1 }], 60, 1000, T0 + i);
    assert.ok(s.size <= 4000, `${s.size} keys held`);
  });

  test('bad arguments reject, whatever the store', async () => {
    const s = new MemoryWindowStore();
    await assert.rejects(s.settle([{ key: 'k', hits: 1 }], 10, 0, T0), RangeError);
    await assert.rejects(s.settle([{ key: 'k', hits: -1 }], 10, 1000, T0), RangeError);
    await assert.rejects(s.settle([{ key: 'k', hits: 2, demand: 1 }], 10, 1000, T0), RangeError);
    await assert.rejects(s.settle([{ key: 'k', hits: 1 }], 1.5, 1000, T0), RangeError);
  });

  test('property: agrees with a model that keeps every settle', () => {
    const op = fc.record({
      key: fc.constantFrom('a', 'b', 'c'),
      hits: fc.integer({ min: 0, max: 6 }),
      extra: fc.integer({ min: 0, max: 3 }),
      dt: fc.integer({ min: 0, max: 400 }),
      // A settle may come from a shard whose clock is behind, by less than a window.
      late: fc.integer({ min: 0, max: 249 }),
    });
    fc.assert(fc.property(fc.integer({ min: 1, max: 12 }), fc.array(op, { maxLength: 80 }), (limit, ops) => {
      const w = 250;
      const s = new MemoryWindowStore();
      const log: { key: string; bucket: number; hits: number; demand: number }[] = [];
      let clock = T0;
      for (const { key, hits, extra, dt, late } of ops) {
        clock += dt;
        const now = clock - late;
        const b = windowBucket(now, w);
        const demand = hits + extra;
        if (hits > 0 || demand > 0) log.push({ key, bucket: b, hits, demand });
        const sum = (bucket: number, f: 'hits' | 'demand') => log.filter((e) => e.key === key && e.bucket === bucket).reduce((a, e) => a + e[f], 0);
        const want = slidingWindowState(pair(sum(b, 'hits'), sum(b - 1, 'hits')), pair(sum(b, 'demand'), sum(b - 1, 'demand')), limit, w, now);
        assert.deepEqual(s.settleNow([{ key, hits, demand }], limit, w, now), [want]);
      }
    }), { numRuns: 300 });
  });
});
