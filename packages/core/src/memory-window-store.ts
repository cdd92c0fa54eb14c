import type { WindowHit, WindowState, WindowStore } from './window-store.ts';

// The sliding-window counter: time is cut into fixed buckets of `windowMs`
// (bucket n covers [n*windowMs, (n+1)*windowMs)); a key keeps one counter
// per bucket, and the window ending at `now` is estimated as
//
//   count = current + ceil(previous * (windowMs - elapsed) / windowMs)
//
// where `elapsed` is how far `now` is into the current bucket: the previous
// bucket's hits are taken as spread evenly over it, and the part of it still
// inside the window counts. Two counters per key, O(1) per check, exact when
// the rate is steady; a burst at the end of the previous bucket is
// under-counted by at most that burst times the elapsed fraction.
//
// THE LUA SCRIPT IN packages/redis/src/window-store.ts MIRRORS
// slidingWindowState OPERATION FOR OPERATION (same order, same rounding, in
// doubles), so memory and Redis give identical answers. Change both or neither;
// the contract tests in packages/redis compare them.

/** The bucket `now` falls in. Buckets are aligned to multiples of `windowMs`, the same on every node. */
export function windowBucket(now: number, windowMs: number): number {
  return Math.floor(now / windowMs);
}

/** A key's counter in the bucket `now` is in, and in the one before. */
export interface BucketPair {
  readonly current: number;
  readonly previous: number;
}

/**
 * The window's state at `now`, given the hit and demand counters of the
 * current and the previous bucket (this settle already added). `now` and
 * `windowMs` are integer ms, `limit` an integer.
 *
 * - `count`: the estimate above, an integer (the previous bucket's part is
 *   rounded up, so the estimate never under-counts by a fraction).
 * - `retryAfterMs`: 0 when `count < limit` (one more hit fits); otherwise the
 *   ms until the estimate falls below `limit` if no hit comes meanwhile
 *   (at least 1). With `limit < 1` nothing ever fits, and it is the time until
 *   every hit so far has left the window.
 * - `demand`: the same estimate over the demand counters.
 */
export function slidingWindowState(hits: BucketPair, demand: BucketPair, limit: number, windowMs: number, now: number): WindowState {
  const w = windowMs;
  const elapsed = now - Math.floor(now / w) * w;
  const cur = hits.current;
  const prev = hits.previous;
  const count = cur + Math.ceil((prev * (w - elapsed)) / w);
  const d = demand.current + Math.ceil((demand.previous * (w - elapsed)) / w);
  if (count < limit) return { count, retryAfterMs: 0, demand: d };
  if (limit < 1) return { count, retryAfterMs: 2 * w - elapsed, demand: d };
  if (cur < limit) {
    // Still in this bucket: the previous bucket's share must fall to `room`
    // or less, i.e. prev * (w - elapsed - t) <= room * w.
    const room = limit - 1 - cur;
    return { count, retryAfterMs: w - elapsed - Math.floor((room * w) / prev), demand: d };
  }
  // Not before the next bucket, where this bucket becomes the previous one:
  // cur * (w - e') <= (limit - 1) * w at e' ms into it.
  return { count, retryAfterMs: w - elapsed + w - Math.floor(((limit - 1) * w) / cur), demand: d };
}

/** Rejects what neither store can count: the same checks in memory and Redis. */
export function checkSettle(hits: readonly WindowHit[], limit: number, windowMs: number, now: number): void {
  if (!Number.isSafeInteger(windowMs) || windowMs < 1) throw new RangeError(`windowMs must be a positive integer, got ${windowMs}`);
  if (!Number.isSafeInteger(limit)) throw new RangeError(`limit must be an integer, got ${limit}`);
  if (!Number.isFinite(now) || now < 0) throw new RangeError(`now must be a non-negative time in ms, got ${now}`);
  for (const h of hits) {
    if (!Number.isSafeInteger(h.hits) || h.hits < 0) throw new RangeError(`hits for ${JSON.stringify(h.key)} must be a non-negative integer, got ${h.hits}`);
    if (h.demand !== undefined && !(Number.isSafeInteger(h.demand) && h.demand >= h.hits)) {
      throw new RangeError(`demand for ${JSON.stringify(h.key)} must be an integer >= hits (${h.hits}), got ${h.demand}`);
    }
  }
}

/** A key's counters (hits h, demand d) for bucket `bucket` and the two before it. */
interface Buckets {
  bucket: number;
  h0: number;
  h1: number;
  h2: number;
  d0: number;
  d1: number;
  d2: number;
  windowMs: number;
}

/**
 * The window store of one node: the embedded default without Redis, the
 * fallback while Redis is down, and the test double of RedisWindowStore.
 * Same math and same answers as Redis (see above), synchronous underneath.
 *
 * Memory: a key is dropped once its newest bucket is three or more buckets
 * old (both buckets a `now` in the present can read are then empty, and a
 * `now` up to one window late still finds what it needs). `settle` sweeps
 * at most once per window, so the map holds the keys written in about the
 * last three windows.
 *
 * Each key must always be used with the same `windowMs` (the buckets are
 * numbered by it), as in Redis.
 *
 * `now` going back by up to one window (shards' clocks differ a little)
 * counts the hits in the bucket they fall in, as Redis does; a clock that
 * steps back further starts the key afresh.
 */
export class MemoryWindowStore implements WindowStore {
  private readonly keys = new Map<string, Buckets>();
  private nextSweepAt = -Infinity;

  async settle(hits: readonly WindowHit[], limit: number, windowMs: number, now: number): Promise<readonly WindowState[]> {
    return this.settleNow(hits, limit, windowMs, now);
  }

  /** `settle` without the promise: for a caller on the same thread. Throws RangeError on bad arguments. */
  settleNow(hits: readonly WindowHit[], limit: number, windowMs: number, now: number): WindowState[] {
    checkSettle(hits, limit, windowMs, now);
    now = Math.floor(now);
    if (now >= this.nextSweepAt) {
      this.sweep(now);
      this.nextSweepAt = now + windowMs;
    }
    const b = windowBucket(now, windowMs);
    const out: WindowState[] = [];
    for (const { key, hits: n, demand } of hits) {
      let e = this.keys.get(key);
      if (n > 0 || (demand ?? 0) > 0) {
        if (e === undefined) {
          e = { bucket: b, h0: 0, h1: 0, h2: 0, d0: 0, d1: 0, d2: 0, windowMs };
          this.keys.set(key, e);
        }
        add(e, b, n, demand ?? n);
      }
      out.push(e === undefined ? slidingWindowState(NONE, NONE, limit, windowMs, now) : slidingWindowState(
        { current: read(e.h0, e.h1, e.h2, e.bucket - b), previous: read(e.h0, e.h1, e.h2, e.bucket - b + 1) },
        { current: read(e.d0, e.d1, e.d2, e.bucket - b), previous: read(e.d0, e.d1, e.d2, e.bucket - b + 1) },
        limit, windowMs, now));
    }
    return out;
  }

  /** Drops keys whose every bucket is three or more buckets before `now`'s. */
  sweep(now: number): void {
    for (const [key, e] of this.keys) {
      if (windowBucket(now, e.windowMs) - e.bucket >= 3) this.keys.delete(key);
    }
  }

  /** Keys held. */
  get size(): number {
    return this.keys.size;
  }
}

const NONE: BucketPair = { current: 0, previous: 0 };

/** The counter `age` buckets before the newest one. */
function read(c0: number, c1: number, c2: number, age: number): number {
  return age === 0 ? c0 : age === 1 ? c1 : age === 2 ? c2 : 0;
}

/** Adds `n` hits and `demand` in bucket `b`. */
function add(e: Buckets, b: number, n: number, demand: number): void {
  const shift = b - e.bucket;
  if (shift > 0 || shift < -2) {
    // Forward: the older buckets slide out. Far back (the clock stepped):
    // start afresh rather than keep counters the window will never read.
    e.h2 = shift === 1 ? e.h1 : shift === 2 ? e.h0 : 0;
    e.h1 = shift === 1 ? e.h0 : 0;
    e.h0 = 0;
    e.d2 = shift === 1 ? e.d1 : shift === 2 ? e.d0 : 0;
    e.d1 = shift === 1 ? e.d0 : 0;
    e.d0 = 0;
    e.bucket = b;
  }
  const age = e.bucket - b;
  if (age === 0) {
    e.h0 += n;
    e.d0 += demand;
  } else if (age === 1) {
    e.h1 += n;
    e.d1 += demand;
  } else {
    e.h2 += n;
    e.d2 += demand;
  }
}
