import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { LocalLimiter, type LocalLimiterOptions } from '../src/local-limiter.ts';
import { MemoryWindowStore } from '../src/memory-window-store.ts';
import type { WindowHit, WindowState } from '../src/window-store.ts';

// A bucket boundary for every window used here.
const T0 = 1_732_900_000_000;

/** Settles what is due, synchronously, against `store`; returns the batch. */
function settleNow(l: LocalLimiter, store: MemoryWindowStore, now: number, answerAt = now): WindowHit[] {
  const batch = l.takeBatch(now);
  if (batch.length > 0) l.apply(batch, store.settleNow(batch, l.limit, l.windowMs, now), answerAt);
  return batch;
}

describe('LocalLimiter', () => {
  test('a cold key takes initialAllowance hits at once, then refuses for about one settle', () => {
    const l = new LocalLimiter({ limit: 1000, windowMs: 1000 });
    assert.equal(l.initialAllowance, 25);
    for (let i = 0; i < 25; i++) assert.equal(l.hit('t', T0), 0, `hit ${i}`);
    assert.equal(l.hit('t', T0), 25);
    assert.equal(l.unsettled, 25);
    // A small limit over a long window still lets a small burst through.
    assert.equal(new LocalLimiter({ limit: 60, windowMs: 60_000 }).initialAllowance, 4);
  });

  test('due: settleMs after the first pending hit, or minGapMs after the last settle once a key ran out', () => {
    const l = new LocalLimiter({ limit: 1000, windowMs: 1000, settleMs: 25, minGapMs: 5 });
    const store = new MemoryWindowStore();
    assert.equal(l.due(T0), false, 'nothing pending');
    l.hit('a', T0 + 1);
    assert.equal(l.due(T0 + 25), false);
    assert.equal(l.dueAt(), T0 + 26);
    assert.equal(l.due(T0 + 26), true);
    settleNow(l, store, T0 + 26);
    // 'b' is new: 25 pass, the 26th runs out; a settle may start 5 ms after the last one.
    for (let i = 0; i < 26; i++) l.hit('b', T0 + 27);
    assert.equal(l.due(T0 + 30), false);
    assert.equal(l.dueAt(), T0 + 31);
    assert.equal(l.due(T0 + 31), true);
  });

  test('takeBatch hands each key\'s hits and tries once; nothing while a settle is in flight', () => {
    const l = new LocalLimiter({ limit: 100, windowMs: 1000, initialAllowance: 3 });
    for (let i = 0; i < 5; i++) l.hit('a', T0);
    l.hit('b', T0);
    const batch = l.takeBatch(T0 + 30);
    assert.deepEqual(batch, [{ key: 'a', hits: 3, demand: 5 }, { key: 'b', hits: 1, demand: 1 }]);
    assert.equal(l.hit('b', T0 + 31), 0);
    assert.equal(l.due(T0 + 100), false, 'one settle in flight at most');
    assert.deepEqual(l.takeBatch(T0 + 100), []);
    assert.equal(l.unsettled, 5);
    l.apply(batch, [{ count: 3, retryAfterMs: 0, demand: 5 }, { count: 1, retryAfterMs: 0, demand: 1 }], T0 + 32);
    assert.deepEqual(l.takeBatch(T0 + 100), [{ key: 'b', hits: 1, demand: 1 }]);
  });

  test('the allowance is the room shared by demand, plus what the window frees before the next answer', () => {
    const l = new LocalLimiter({ limit: 1000, windowMs: 1000, initialAllowance: 1000 });
    for (let i = 0; i < 25; i++) l.hit('k', T0);
    const batch = l.takeBatch(T0);
    // This shard tried 25 of the window's demand of 100: its share is a quarter.
    l.apply(batch, [{ count: 100, retryAfterMs: 0, demand: 100 }], T0 + 2);
    // (0.25 * (1000 - 100) + 100 * 25 / 1000) / (100 / 25) = 56.875
    let accepted = 0;
    while (l.hit('k', T0 + 3) === 0) accepted++;
    assert.equal(accepted, 56);
  });

  test('a key the store calls full is refused until retryAfterMs, then one probe passes and is settled', () => {
    const l = new LocalLimiter({ limit: 10, windowMs: 1000 });
    for (let i = 0; i < 4; i++) l.hit('k', T0);
    const batch = l.takeBatch(T0 + 25);
    l.apply(batch, [{ count: 10, retryAfterMs: 400, demand: 4 }], T0 + 27);
    assert.equal(l.hit('k', T0 + 30), 395);
    assert.equal(l.hit('k', T0 + 424), 1);
    assert.equal(l.due(T0 + 1000), false, 'a blocked key costs no settle');
    assert.equal(l.hit('k', T0 + 425), 0, 'the probe');
    assert.equal(l.hit('k', T0 + 425), 25, 'and nothing more before the store answers');
    // Demand counts every try since the last settle, refused ones too.
    assert.deepEqual(l.takeBatch(T0 + 450), [{ key: 'k', hits: 1, demand: 4 }]);
  });

  test('a failed settle loses no hit and counts none twice', () => {
    const l = new LocalLimiter({ limit: 100, windowMs: 1000, initialAllowance: 5 });
    const store = new MemoryWindowStore();
    for (let i = 0; i < 3; i++) l.hit('a', T0);
    const batch = l.takeBatch(T0 + 25);
    l.hit('a', T0 + 26);
    l.fail(batch, T0 + 30);
    assert.equal(l.due(T0 + 30), true, 'the caller may retry (with a fallback store) at once');
    assert.equal(l.unsettled, 4);
    assert.deepEqual(settleNow(l, store, T0 + 30), [{ key: 'a', hits: 4, demand: 4 }]);
    assert.equal(l.unsettled, 0);
    assert.equal(store.settleNow([{ key: 'a', hits: 0 }], 100, 1000, T0 + 30)[0]!.count, 4);
    assert.throws(() => l.fail(batch, T0 + 31), /no settle in flight/);
  });

  test('idle keys are forgotten; keys with unsettled hits or a block are kept', () => {
    const l = new LocalLimiter({ limit: 10, windowMs: 1000 });
    const store = new MemoryWindowStore();
    for (let i = 0; i < 1000; i++) l.hit(`ip-${i}`, T0);
    settleNow(l, store, T0 + 25);
    l.hit('busy', T0 + 900);
    const b = l.takeBatch(T0 + 950);
    l.apply(b, [{ count: 10, retryAfterMs: 5000, demand: 10 }], T0 + 951);
    l.hit('pending', T0 + 990);
    assert.equal(l.size, 1002);
    l.sweep(T0 + 999);
    assert.equal(l.size, 1002, 'not idle for a window yet');
    l.sweep(T0 + 2000);
    assert.equal(l.size, 2, 'the blocked key and the key with a pending hit stay');
    // New keys trigger the sweep by themselves: memory holds the keys of about two windows.
    for (let i = 0; i < 5000; i++) {
      const now = T0 + 3000 + i;
      l.hit(`x-${i}`, now);
      if (l.due(now)) settleNow(l, store, now);
    }
    // Swept once per idleMs, of keys idle that long: at most two windows of keys, and those not settled yet.
    assert.ok(l.size <= 2100, `${l.size} keys`);
  });

  test('property: every accepted hit is settled exactly once, and a blocked key is refused', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('hit' as const), key: fc.constantFrom('a', 'b', 'c'), dt: fc.integer({ min: 0, max: 20 }), n: fc.integer({ min: 1, max: 30 }) }),
      fc.record({ kind: fc.constant('tick' as const), dt: fc.integer({ min: 0, max: 60 }), latency: fc.integer({ min: 0, max: 10 }), failed: fc.boolean() }),
    );
    fc.assert(fc.property(fc.integer({ min: 1, max: 50 }), fc.constantFrom(100, 1000), fc.array(op, { maxLength: 150 }), (limit, windowMs, ops) => {
      const l = new LocalLimiter({ limit, windowMs });
      const store = new MemoryWindowStore();
      // The model: hits accepted and hits stored, per key, and blocks the store announced.
      const accepted = new Map<string, number>();
      const stored = new Map<string, number>();
      const blockedUntil = new Map<string, number>();
      let now = T0;
      for (const o of ops) {
        now += o.dt;
        if (o.kind === 'hit') {
          for (let i = 0; i < o.n; i++) {
            const r = l.hit(o.key, now);
            assert.ok(Number.isInteger(r) && r >= 0);
            if (r === 0) accepted.set(o.key, (accepted.get(o.key) ?? 0) + 1);
            if (now < (blockedUntil.get(o.key) ?? -Infinity)) assert.ok(r >= (blockedUntil.get(o.key)! - now), 'refused while blocked, for as long');
          }
          continue;
        }
        if (!l.due(now)) continue;
        const batch = l.takeBatch(now);
        assert.ok(batch.length > 0);
        assert.deepEqual(l.takeBatch(now), [], 'one settle in flight');
        if (o.failed) {
          l.fail(batch, now + o.latency);
          continue;
        }
        const states = store.settleNow(batch, limit, windowMs, now);
        for (let i = 0; i < batch.length; i++) {
          const { key, hits, demand } = batch[i]!;
          assert.ok(hits >= 1 && demand! >= hits);
          stored.set(key, (stored.get(key) ?? 0) + hits);
          if (states[i]!.retryAfterMs > 0) blockedUntil.set(key, now + states[i]!.retryAfterMs);
        }
        l.apply(batch, states, now + o.latency);
      }
      let unsettled = 0;
      for (const [key, n] of accepted) unsettled += n - (stored.get(key) ?? 0);
      assert.equal(l.unsettled, unsettled);
    }), { numRuns: 500 });
  });

  test('property: one shard alone never goes past the limit by more than one settle cycle\'s share and a cold start', () => {
    fc.assert(fc.property(
      fc.integer({ min: 1, max: 200 }), fc.integer({ min: 0, max: 5 }),
      fc.array(fc.record({ dt: fc.integer({ min: 0, max: 30 }), n: fc.integer({ min: 0, max: 40 }) }), { minLength: 1, maxLength: 300 }),
      (limit, latency, ops) => {
        const windowMs = 1000;
        const l = new LocalLimiter({ limit, windowMs });
        const store = new MemoryWindowStore();
        const perBucket = new Map<number, number>();
        let inFlight: { at: number; batch: WindowHit[]; states: WindowState[] } | undefined;
        let now = T0;
        for (const { dt, n } of ops) {
          for (let t = 0; t < dt; t++) {
            now++;
            if (inFlight !== undefined && now >= inFlight.at) {
              l.apply(inFlight.batch, inFlight.states, now);
              inFlight = undefined;
            }
            if (l.due(now)) {
              const batch = l.takeBatch(now);
              inFlight = { at: now + latency, batch, states: store.settleNow(batch, limit, windowMs, now) };
            }
          }
          for (let i = 0; i < n; i++) {
            if (l.hit('k', now) === 0) perBucket.set(Math.floor(now / windowMs), (perBucket.get(Math.floor(now / windowMs)) ?? 0) + 1);
          }
        }
        const cycle = Math.max(l.minGapMs, latency);
        const bound = limit + (limit * cycle) / windowMs + l.initialAllowance + 2;
        for (const [b, count] of perBucket) assert.ok(count <= bound, `bucket ${b}: ${count} accepted, limit ${limit}, bound ${bound}`);
      },
    ), { numRuns: 300 });
  });
});

interface SimOptions {
  readonly limit: number;
  readonly windowMs?: number;
  /** Shards, with the store's round trip and the gap between hits of each (ms). */
  readonly shards: readonly { readonly latencyMs: number; readonly hitEveryMs: number }[];
  readonly keys?: readonly string[];
  readonly seconds: number;
  /** Every n-th settle fails and the limiter retries it. */
  readonly failEvery?: number;
  readonly opts?: Partial<LocalLimiterOptions>;
}

interface SimResult {
  /** Accepted per aligned window, per key. */
  readonly perWindow: Map<string, number[]>;
  /** Fewest and most accepted in any window-long span starting after the first window (10 ms steps), per key. */
  readonly sliding: Map<string, { min: number; max: number }>;
  readonly hits: number;
  readonly commands: number;
  readonly settles: number;
  readonly limiters: readonly LocalLimiter[];
  readonly accepted: Map<string, number>;
  /** Hits the store took and answered for, per key. */
  readonly stored: Map<string, number>;
}

/**
 * Shards sharing one store on a simulated clock (50 us steps): each receives
 * hits on every key at its own pace, and the store answers after the shard's
 * round trip. No timers, no randomness.
 */
function simulate(o: SimOptions): SimResult {
  const windowMs = o.windowMs ?? 1000;
  const keys = o.keys ?? ['tenant'];
  const store = new MemoryWindowStore();
  const limiters = o.shards.map(() => new LocalLimiter({ limit: o.limit, windowMs, ...o.opts }));
  const flights: ({ at: number; batch: WindowHit[]; states: readonly WindowState[] | undefined } | undefined)[] = limiters.map(() => undefined);
  const nextHit = o.shards.map(() => 0);
  const times = new Map<string, number[]>(keys.map((k) => [k, []]));
  const stored = new Map<string, number>();
  let hits = 0;
  let commands = 0;
  let settles = 0;
  const step = 0.05;
  const end = o.seconds * 1000;
  for (let i = 0; i * step < end; i++) {
    const t = i * step;
    const now = T0 + t;
    for (let s = 0; s < limiters.length; s++) {
      const l = limiters[s]!;
      const f = flights[s];
      if (f !== undefined && now >= f.at) {
        if (f.states === undefined) {
          l.fail(f.batch, now);
        } else {
          l.apply(f.batch, f.states, now);
          for (const h of f.batch) stored.set(h.key, (stored.get(h.key) ?? 0) + h.hits);
        }
        flights[s] = undefined;
      }
      if (t >= nextHit[s]!) {
        nextHit[s]! += o.shards[s]!.hitEveryMs;
        for (const k of keys) {
          hits++;
          if (l.hit(k, now) === 0) times.get(k)!.push(t);
        }
      }
      if (l.due(now)) {
        const batch = l.takeBatch(now);
        settles++;
        commands += batch.length;
        const failed = o.failEvery !== undefined && settles % o.failEvery === 0;
        flights[s] = { at: now + o.shards[s]!.latencyMs, batch, states: failed ? undefined : store.settleNow(batch, o.limit, windowMs, now) };
      }
    }
  }
  const perWindow = new Map<string, number[]>();
  const sliding = new Map<string, { min: number; max: number }>();
  const accepted = new Map<string, number>();
  for (const [k, ts] of times) {
    const counts = Array.from({ length: Math.ceil(end / windowMs) }, () => 0);
    for (const t of ts) counts[Math.floor(t / windowMs)]!++;
    perWindow.set(k, counts);
    accepted.set(k, ts.length);
    let min = Infinity;
    let max = 0;
    let lo = 0;
    let hi = 0;
    for (let start = windowMs; start + windowMs <= end; start += 10) {
      while (lo < ts.length && ts[lo]! < start) lo++;
      while (hi < ts.length && ts[hi]! < start + windowMs) hi++;
      min = Math.min(min, hi - lo);
      max = Math.max(max, hi - lo);
    }
    sliding.set(k, { min, max });
  }
  return { perWindow, sliding, hits, commands, settles, limiters, accepted, stored };
}

/** Every accepted hit is in the store once, or still unsettled (pending or in flight) in its shard. */
function assertConserved(r: SimResult): void {
  const unsettled = r.limiters.reduce((a, l) => a + l.unsettled, 0);
  let accepted = 0;
  let stored = 0;
  for (const n of r.accepted.values()) accepted += n;
  for (const n of r.stored.values()) stored += n;
  assert.equal(stored + unsettled, accepted);
}

/** Every aligned window, and every window-long span after the first window, within ±tolerance of the limit. */
function assertWithin(r: SimResult, limit: number, tolerance: number): void {
  for (const [k, counts] of r.perWindow) {
    for (const [i, n] of counts.entries()) {
      assert.ok(Math.abs(n - limit) <= tolerance * limit, `key ${k}, window ${i}: ${n} accepted for a limit of ${limit} (${counts.join(', ')})`);
    }
    const { min, max } = r.sliding.get(k)!;
    assert.ok(min >= (1 - tolerance) * limit && max <= (1 + tolerance) * limit, `key ${k}: sliding windows hold ${min} to ${max} for a limit of ${limit}`);
  }
}

describe('LocalLimiter: shards sharing a store, simulated', () => {
  // 2 nodes x 2 shards: the store is 1 ms away from node A's shards, 3 ms from node B's.
  const saturating = [{ latencyMs: 1, hitEveryMs: 0.1 }, { latencyMs: 1, hitEveryMs: 0.1 }, { latencyMs: 3, hitEveryMs: 0.1 }, { latencyMs: 3, hitEveryMs: 0.1 }];

  for (const limit of [100, 1000]) {
    test(`saturated from 4 shards for 10 s, ${limit} per second: every window within 10% of the limit, under 1 store command per 50 hits`, () => {
      const r = simulate({ limit, shards: saturating, seconds: 10 });
      assertWithin(r, limit, 0.1);
      assert.ok(r.commands * 50 < r.hits, `${r.commands} store commands for ${r.hits} hits`);
      // At most one settle per settleMs per shard, whatever the traffic.
      assert.ok(r.settles <= 4 * 10 * (1000 / 25), `${r.settles} settles`);
      assertConserved(r);
    });
  }

  test('one shard spends much and three little: the total still holds, and each key on its own', () => {
    const shards = [{ latencyMs: 1, hitEveryMs: 0.1 }, { latencyMs: 1, hitEveryMs: 2 }, { latencyMs: 3, hitEveryMs: 2 }, { latencyMs: 3, hitEveryMs: 2 }];
    const r = simulate({ limit: 1000, shards, keys: ['t1', 't2'], seconds: 10 });
    assertWithin(r, 1000, 0.1);
  });

  test('a store that fails every 7th settle: no hit lost or counted twice, the limit still holds', () => {
    const r = simulate({ limit: 1000, shards: saturating, seconds: 10, failEvery: 7 });
    assertWithin(r, 1000, 0.1);
    assertConserved(r);
  });
});
