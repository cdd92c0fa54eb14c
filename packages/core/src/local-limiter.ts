import type { WindowHit, WindowState } from './window-store.ts';

export interface LocalLimiterOptions {
  /** Hits per window, cluster-wide, per key. A positive integer. */
  readonly limit: number;
  /** The sliding window, ms. A positive integer. */
  readonly windowMs: number;
  /** Longest an accepted hit waits before it is settled. Default 25 ms. */
  readonly settleMs?: number;
  /**
   * Shortest time between the starts of two settles when a key has run out
   * of allowance and wants more. Default `settleMs`: then a shard starts at
   * most one settle per `settleMs`, whatever the traffic.
   */
  readonly minGapMs?: number;
  /** Fraction of the room left in the window that the shards of a key hand out per settle, beyond what the window frees. Default 0.25. */
  readonly share?: number;
  /**
   * What a shard may accept of a key it knows nothing about (new, or
   * forgotten) before the store answers. Default one spender's pace for one
   * settle interval, and at least a small burst:
   * max(1, floor(limit * settleMs / windowMs), min(4, floor(limit / 10))).
   */
  readonly initialAllowance?: number;
  /** A key with no hit for this long, nothing unsettled and no block is forgotten. Default `windowMs`. */
  readonly idleMs?: number;
}

interface KeyState {
  /** Hits this shard may still accept before the store's next answer. */
  allowance: number;
  /** Accepted and not yet in a batch. */
  pending: number;
  /** Tried (accepted or refused) and not yet in a batch. */
  tried: number;
  /** Accepted, and tried, in the batch at the store now. */
  inFlight: number;
  inFlightTried: number;
  /** The store said the window is full: refuse until then. */
  blockedUntil: number;
  /** The window's demand over this shard's (>= 1): the number of spenders if all spend alike. */
  spenders: number;
  /** This shard's settled demand in bucket `bucket` and the one before (the store's bucket math). */
  bucket: number;
  myDemand: number;
  myPrevDemand: number;
  /** The allowance the last answer gave. */
  grant: number;
  lastHitAt: number;
}

/**
 * The per-shard half of a cluster-wide sliding window (per tenant, per IP):
 * `hit` decides on the spot from a local allowance and never waits on the
 * store; accepted hits are settled with the WindowStore in batches whose
 * answers set the next allowances. The caller owns the clock, the timer and
 * the store: from its timer (and, if it likes, after hits) it checks
 * `due(now)`, then calls `takeBatch(now)`, `store.settle(batch, limit,
 * windowMs, now)` with the same `now`, and `apply` or `fail` with the
 * outcome. At most one settle is in flight.
 *
 * THE ALLOWANCE RULE, on each answer for a key (count = the window's
 * estimate with this batch in it, as of when the batch left):
 *
 *   room     = limit - count - hits accepted here since the batch left
 *   spenders = window demand / my demand (>= 1)   (demand = hits tried)
 *   freed    = count * max(minGapMs, round trip) / windowMs
 *   unseen   = (spenders - 1) * my last allowance / 2
 *   allowance = (share * (room - unseen) + freed) / spenders,
 *               at most twice the last allowance (or initialAllowance),
 *               0 when room < 1, plus the fraction of a hit left over
 *               (fractions add up across answers rather than being
 *               floored away, which under-admits when a shard's part is a
 *               few hits per cycle).
 *
 * - `freed` is what the window frees before this shard's next answer (in a
 *   steady state the previous bucket holds about `count`): without it a
 *   saturated window settles below the limit by the fraction of a window
 *   one settle takes.
 * - `spenders` divides the handout in proportion to demand (refused tries
 *   included, so a shard that was given little but wants much is seen as
 *   wanting much). Under saturation with every shard alike it is the number
 *   of shards. It comes from the store's `demand`, a sliding window like the
 *   count, over this shard's own settled demand in the same buckets.
 * - `unseen` stands for the other shards' last allowances that are not in
 *   the count yet (about half of them, settles being spread over a cycle).
 * - The doubling cap bounds a cold start, when each shard still sees little
 *   demand but its own.
 *
 * A key out of allowance with nothing pending or in flight gets one probe
 * hit, so that a settle, and an answer, always follow.
 *
 * When the store answers that the window is full, the key is blocked here
 * until `retryAfterMs` (when one more hit fits) plus (spenders - 1) *
 * windowMs / limit, the time the window takes to free a hit for each other
 * spender (at most half a window); then one probe hit is let through and
 * settled.
 *
 * ACCURACY. Over-admission is at most the sum of the allowances outstanding
 * at once over every shard (granted and not yet in the store's count), plus
 * one probe per spender after a block. The allowances handed out per settle
 * cycle are about what the window frees in that cycle, limit * T / windowMs
 * with T = max(minGapMs, round trip), plus `share` of the room left, so the
 * excess is about limit * T / windowMs + spenders: 2.5% of a 1000 per second
 * limit at T = 25 ms. Measured in the simulation test (2 nodes x 2 shards,
 * store latency 1 and 3 ms, every shard saturated for 10 s), every aligned
 * window within 3% of the limit at 100 and 1000 per second. A cold key takes
 * up to spenders * initialAllowance before the first answers; a forgotten key
 * is cold again.
 *
 * COST. A key costs one store command per settle it is in. A shard starts a
 * settle at most once per `minGapMs` and, under saturation, about that
 * often: with the defaults at most 40 commands per second per key per
 * shard, however many hits.
 */
export class LocalLimiter {
  readonly limit: number;
  readonly windowMs: number;
  readonly settleMs: number;
  readonly minGapMs: number;
  readonly share: number;
  readonly initialAllowance: number;
  readonly idleMs: number;

  private readonly keys = new Map<string, KeyState>();
  /** Keys with pending > 0, each once. */
  private dirty: string[] = [];
  private pendingHits = 0;
  private oldestPendingAt = Infinity;
  /** A hit was refused for want of allowance (not by a block): settle as soon as minGapMs allows. */
  private starving = false;
  private inFlight = false;
  private batchAt = NaN;
  private lastSettleAt = -Infinity;
  private nextSweepAt = -Infinity;
  /** Settles taken, for metrics and tests. */
  settles = 0;

  constructor(opts: LocalLimiterOptions) {
    const { limit, windowMs } = opts;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError(`limit must be a positive integer, got ${limit}`);
    if (!Number.isSafeInteger(windowMs) || windowMs < 1) throw new RangeError(`windowMs must be a positive integer, got ${windowMs}`);
    this.limit = limit;
    this.windowMs = windowMs;
    this.settleMs = positive('settleMs', opts.settleMs ?? 25);
    this.minGapMs = positive('minGapMs', opts.minGapMs ?? this.settleMs);
    this.share = opts.share ?? 0.25;
    if (!(this.share > 0 && this.share <= 1)) throw new RangeError(`share must be in (0, 1], got ${this.share}`);
    this.initialAllowance = opts.initialAllowance ?? Math.max(1, Math.floor((limit * this.settleMs) / windowMs), Math.min(4, Math.floor(limit / 10)));
    if (!Number.isSafeInteger(this.initialAllowance) || this.initialAllowance < 1) {
      throw new RangeError(`initialAllowance must be a positive integer, got ${this.initialAllowance}`);
    }
    this.idleMs = positive('idleMs', opts.idleMs ?? windowMs);
  }

  /**
   * One hit on `key` at `now`. Returns 0 when accepted (it will be settled),
   * else the ms to tell the client to wait (at least 1): until the store's
   * window has room when the key is blocked, or about one settle when this
   * shard has only run out of allowance. Synchronous; no allocation for a
   * known key.
   */
  hit(key: string, now: number): number {
    let s = this.keys.get(key);
    if (s === undefined) {
      if (now >= this.nextSweepAt) this.sweep(now);
      s = {
        allowance: this.initialAllowance, pending: 0, tried: 0, inFlight: 0, inFlightTried: 0, blockedUntil: -Infinity,
        spenders: 1, bucket: 0, myDemand: 0, myPrevDemand: 0, grant: 0, lastHitAt: now,
      };
      this.keys.set(key, s);
    }
    s.lastHitAt = now;
    s.tried++;
    if (now < s.blockedUntil) return Math.max(1, Math.ceil(s.blockedUntil - now));
    // Nothing owed to or awaited from the store and no allowance: a block
    // has run out, or the last answer left no room. One probe.
    if (s.allowance < 1 && s.pending === 0 && s.inFlight === 0) s.allowance = 1;
    if (s.allowance >= 1) {
      s.allowance--;
      if (s.pending++ === 0) this.dirty.push(key);
      if (this.pendingHits++ === 0) this.oldestPendingAt = now;
      return 0;
    }
    this.starving = true;
    return Math.max(1, Math.ceil(this.minGapMs));
  }

  /** Whether to start a settle now: none in flight, and a hit has waited settleMs, or a key ran out of allowance and minGapMs has passed since the last settle. */
  due(now: number): boolean {
    if (this.inFlight || this.pendingHits === 0) return false;
    if (now - this.oldestPendingAt >= this.settleMs) return true;
    return this.starving && now - this.lastSettleAt >= this.minGapMs;
  }

  /** When `due` turns true if nothing else happens; Infinity while a settle is in flight or nothing is pending. For the caller's timer. */
  dueAt(): number {
    if (this.inFlight || this.pendingHits === 0) return Infinity;
    const byAge = this.oldestPendingAt + this.settleMs;
    return this.starving ? Math.min(byAge, this.lastSettleAt + this.minGapMs) : byAge;
  }

  /**
   * The pending hits per key, to settle at `now`; the settle is then in
   * flight until `apply` or `fail`. Returns [] (and starts nothing) while a
   * settle is in flight or when nothing is pending. Forgets idle keys first
   * (at most once per idleMs).
   */
  takeBatch(now: number): WindowHit[] {
    if (this.inFlight) return [];
    if (now >= this.nextSweepAt) this.sweep(now);
    if (this.pendingHits === 0) return [];
    const batch: WindowHit[] = [];
    for (const key of this.dirty) {
      const s = this.keys.get(key)!;
      batch.push({ key, hits: s.pending, demand: s.tried });
      s.inFlight = s.pending;
      s.inFlightTried = s.tried;
      s.pending = 0;
      s.tried = 0;
    }
    this.dirty = [];
    this.pendingHits = 0;
    this.oldestPendingAt = Infinity;
    this.starving = false;
    this.inFlight = true;
    this.batchAt = now;
    this.lastSettleAt = now;
    this.settles++;
    return batch;
  }

  /**
   * The store's answer to the batch in flight (`states[i]` for `batch[i]`,
   * as `settle` takes and gives them), arriving at `now`: sets each key's
   * allowance, or blocks it.
   */
  apply(batch: readonly WindowHit[], states: readonly WindowState[], now: number): void {
    if (!this.inFlight) throw new Error('LocalLimiter.apply: no settle in flight');
    if (states.length !== batch.length) throw new Error(`LocalLimiter.apply: ${states.length} states for ${batch.length} keys`);
    const at = this.batchAt;
    const w = this.windowMs;
    for (let i = 0; i < batch.length; i++) {
      const st = states[i]!;
      const s = this.inFlightState(batch[i]!.key, 'apply');
      const lastGrant = s.grant;
      // This shard's demand in the store's buckets, estimated as the store does.
      const b = Math.floor(at / w);
      if (b > s.bucket) {
        s.myPrevDemand = b === s.bucket + 1 ? s.myDemand : 0;
        s.myDemand = 0;
        s.bucket = b;
      }
      s.myDemand += s.inFlightTried;
      const mine = s.myDemand + (s.myPrevDemand * (w - (at - b * w))) / w;
      s.spenders = Math.max(1, st.demand / Math.max(1, mine));
      s.inFlight = 0;
      s.inFlightTried = 0;
      s.lastHitAt = Math.max(s.lastHitAt, now);
      if (st.retryAfterMs > 0) {
        const stagger = Math.min(w / 2, ((s.spenders - 1) * w) / this.limit);
        s.blockedUntil = at + st.retryAfterMs + Math.round(stagger);
        s.allowance = 0;
        s.grant = 0;
        continue;
      }
      const room = this.limit - st.count - s.pending;
      const freed = (st.count * Math.max(this.minGapMs, now - at)) / w;
      const unseen = ((s.spenders - 1) * lastGrant) / 2;
      const a = room < 1 ? 0 : Math.max(0, Math.min((this.share * (room - unseen) + freed) / s.spenders, Math.max(this.initialAllowance, 2 * lastGrant)));
      // Fractions add up over answers rather than being floored away (a
      // floor under-admits whenever a spender's part is a few hits per cycle).
      s.allowance = a + (s.allowance - Math.floor(s.allowance));
      s.grant = a;
    }
    this.inFlight = false;
  }

  /**
   * The store failed the batch in flight. Its hits and tries become pending
   * again, to be settled once, with the same store or a fallback (`due` is
   * true at once); each key keeps what is left of its allowance and gets no
   * more until an answer comes.
   */
  fail(batch: readonly WindowHit[], now: number): void {
    if (!this.inFlight) throw new Error('LocalLimiter.fail: no settle in flight');
    for (const { key } of batch) {
      const s = this.inFlightState(key, 'fail');
      if (s.pending === 0) this.dirty.push(key);
      s.pending += s.inFlight;
      s.tried += s.inFlightTried;
      this.pendingHits += s.inFlight;
      s.inFlight = 0;
      s.inFlightTried = 0;
    }
    this.oldestPendingAt = Math.min(this.oldestPendingAt, now - this.settleMs);
    this.inFlight = false;
  }

  private inFlightState(key: string, op: string): KeyState {
    const s = this.keys.get(key);
    if (s === undefined) throw new Error(`LocalLimiter.${op}: ${JSON.stringify(key)} is not in the settle in flight`);
    return s;
  }

  /** Forgets keys idle for idleMs with nothing pending or in flight and no block. Runs by itself at most once per idleMs. */
  sweep(now: number): void {
    for (const [key, s] of this.keys) {
      if (s.pending === 0 && s.inFlight === 0 && now >= s.blockedUntil && now - s.lastHitAt >= this.idleMs) this.keys.delete(key);
    }
    this.nextSweepAt = now + this.idleMs;
  }

  /** Keys remembered. */
  get size(): number {
    return this.keys.size;
  }

  /** Hits accepted and not yet answered for (pending and in flight). */
  get unsettled(): number {
    let n = this.pendingHits;
    if (this.inFlight) for (const s of this.keys.values()) n += s.inFlight;
    return n;
  }
}

function positive(name: string, v: number): number {
  if (!(Number.isFinite(v) && v > 0)) throw new RangeError(`${name} must be a positive number of ms, got ${v}`);
  return v;
}
