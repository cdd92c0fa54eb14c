import { EventClass } from '@sluice/protocol';

/*
 * Outbound backpressure per socket (PROTOCOL.md, "Outbound backpressure per
 * socket"; ARCHITECTURE.md, "Fan-out: native fast lane, JavaScript slow lane").
 *
 * These run once per delivered event per congested socket, so the common
 * path allocates nothing: no closures, no temporary arrays, and no joined
 * `${topic}\u0000${key}` strings. (topic, key) indexes are two-level Maps
 * instead: a joined key is a fresh string that has to be flattened and
 * hashed on every lookup (measured here: about 200 ns per lookup against
 * 30 ns for the two-level Map, whose strings come from the event and keep
 * their hash). Time is always a parameter, in milliseconds, from one
 * monotonic clock; a clock that steps backwards only delays things.
 */

/** One event waiting for a congested socket. `Delivery` from broker.ts fits. */
export interface MailItem {
  readonly topic: string;
  readonly cls: EventClass;
  /** With `topic`, what a keyed event supersedes within; ignored for the other classes. */
  readonly key: string | undefined;
  readonly id: string | undefined;
  /** The encoded frame, sent as is. */
  readonly frame: string;
}

export interface MailboxLimits {
  /** `WS_EPHEMERAL_DROP_QUEUE_LEN`: ephemeral events are dropped once the mailbox holds this many. */
  readonly ephemeralDropLen: number;
  /** `WS_SLOW_CONSUMER_QUEUE_LEN`: a mailbox longer than this closes the socket with 4503. */
  readonly slowConsumerLen: number;
}

/**
 * What became of an offered item:
 * - `queued`: stored at the tail;
 * - `dropped`: an ephemeral item refused, nothing stored (count a drop);
 * - `superseded`: a keyed item replaced the older item of its (topic, key),
 *   whose content is gone (count one superseded drop);
 * - `overflow`: stored at the tail, and the mailbox is now longer than
 *   `slowConsumerLen`: close the socket with 4503 `slow_consumer`.
 */
export type Offer = 'queued' | 'dropped' | 'superseded' | 'overflow';

/**
 * A congested socket's queue, applying the per-class tiers of PROTOCOL.md.
 *
 * Layout: `buf[head, tail)` holds the items, oldest first. Every item has an
 * absolute position (`base` + its slot) that only ever grows, so the index
 * of keyed items (`(topic, key)` to absolute position) stays valid while the
 * front is shifted off and while the array is compacted. Shifted slots are
 * cleared at once (nothing is retained); the dead prefix is compacted away
 * only once it is at least `compactAfter` slots and at least as long as the
 * live part, so the copying is amortized O(1) per shift.
 */
export class Mailbox<T extends MailItem> {
  private buf: (T | undefined)[] = [];
  private head = 0;
  private tail = 0;
  /** Absolute position of `buf[0]`. */
  private base = 0;
  /**
   * topic, then key, of every keyed item held, to its absolute position. An
   * emptied inner Map is kept for the next keyed item of that topic (so at
   * most one per topic seen since the last `clear`).
   */
  private readonly keyed = new Map<string, Map<string, number>>();
  private heldBytes = 0;
  private readonly ephemeralDropLen: number;
  private readonly slowConsumerLen: number;
  private readonly compactAfter: number;

  /**
   * `compactAfter` is tuning only (how many dead slots may pile up before
   * they are reclaimed); it changes no observable behaviour.
   */
  constructor(limits: MailboxLimits, compactAfter = 256) {
    this.ephemeralDropLen = limits.ephemeralDropLen;
    this.slowConsumerLen = limits.slowConsumerLen;
    this.compactAfter = Math.max(1, compactAfter);
  }

  /** Items held. */
  get size(): number {
    return this.tail - this.head;
  }

  /**
   * Sum of `frame.length` (UTF-16 code units, equal to bytes for ASCII JSON)
   * over the items held, for the memory gauge. Exact after every call.
   */
  get bytes(): number {
    return this.heldBytes;
  }

  /**
   * Applies the tier of the item's class. Guarantees:
   * - ephemeral: dropped, nothing stored, when the mailbox already holds
   *   `ephemeralDropLen` items or more; else queued at the tail.
   * - keyed (with a key): when an item of the same (topic, key) is held, it
   *   is replaced IN PLACE: the position (and so the order relative to every
   *   other item) stays the older item's, the content becomes the new item's,
   *   the size does not change and the result is `superseded`. So a mailbox
   *   never holds two keyed items of one (topic, key), and what is delivered for a
   *   (topic, key) is always its newest content. Else queued at the tail.
   *   A keyed item without a key is queued like a durable one.
   * - durable: always queued at the tail; never dropped or reordered here.
   * - whatever was queued at the tail: when the size is then above
   *   `slowConsumerLen` the result is `overflow` instead of `queued` (the
   *   item IS held; the caller closes the socket). `superseded` and
   *   `dropped` never grow the size, so they never overflow.
   */
  offer(item: T): Offer {
    const cls = item.cls;
    if (cls === EventClass.Ephemeral) {
      if (this.tail - this.head >= this.ephemeralDropLen) return 'dropped';
    } else if (cls === EventClass.Keyed && item.key !== undefined) {
      let keys = this.keyed.get(item.topic);
      if (keys === undefined) {
        keys = new Map();
        this.keyed.set(item.topic, keys);
      }
      const at = keys.get(item.key);
      if (at !== undefined) {
        const slot = at - this.base;
        const old = this.buf[slot] as T;
        this.buf[slot] = item;
        this.heldBytes += item.frame.length - old.frame.length;
        return 'superseded';
      }
      keys.set(item.key, this.base + this.tail);
    }
    if (this.tail === this.buf.length) this.buf.push(item);
    else this.buf[this.tail] = item;
    this.tail++;
    this.heldBytes += item.frame.length;
    return this.tail - this.head > this.slowConsumerLen ? 'overflow' : 'queued';
  }

  /**
   * Removes and returns the oldest item (by position: a superseding keyed
   * item sits where the item it replaced was), or undefined when empty.
   * Items come out exactly in the order `offer` queued them, each once.
   */
  shift(): T | undefined {
    if (this.head === this.tail) return undefined;
    const item = this.buf[this.head] as T;
    this.buf[this.head] = undefined;
    this.head++;
    this.heldBytes -= item.frame.length;
    if (item.cls === EventClass.Keyed && item.key !== undefined) this.keyed.get(item.topic)?.delete(item.key);
    if (this.head === this.tail) {
      // Empty: rewind in place, positions keep growing.
      this.base += this.head;
      this.head = 0;
      this.tail = 0;
    } else if (this.head >= this.compactAfter && this.head >= this.tail - this.head) {
      this.compact();
    }
    return item;
  }

  /** The item `shift` would return next, left in place. */
  peek(): T | undefined {
    return this.head === this.tail ? undefined : this.buf[this.head];
  }

  /** Forgets every item (nothing is delivered) and releases the storage. */
  clear(): void {
    this.base += this.tail;
    this.buf = [];
    this.head = 0;
    this.tail = 0;
    this.keyed.clear();
    this.heldBytes = 0;
  }

  private compact(): void {
    const live = this.tail - this.head;
    this.buf.copyWithin(0, this.head, this.tail);
    this.buf.fill(undefined, live, this.tail);
    this.base += this.head;
    this.head = 0;
    this.tail = live;
  }
}

/** Per-socket congestion timer, in the socket's user data, mutated in place. */
export interface CongestionState {
  /** When the socket was first seen at or above the soft limit; -1 when it is not congested. */
  congestedSince: number;
}

export interface OutboundLimits {
  /** `WS_MAX_BUFFERED_BYTES`, the hard limit. */
  readonly maxBufferedBytes: number;
  /** `WS_SLOW_CLIENT_BUFFER_BYTES` after `effectiveSlowBufferBytes`, the soft limit. */
  readonly slowBufferBytes: number;
  /** `WS_MAX_CONGESTED_MS`; 0 = never close for congestion. */
  readonly maxCongestedMs: number;
}

/**
 * - `send`: write the event now;
 * - `mailbox`: the socket is congested: put the event in its mailbox;
 * - `close_buffer_limit`: close 1013 `buffer_limit`;
 * - `close_congested`: close 1013 `congested`.
 */
export type Outbound = 'send' | 'mailbox' | 'close_buffer_limit' | 'close_congested';

/**
 * Decides one outbound event for a socket with `bufferedBytes` buffered, in
 * PROTOCOL.md's order:
 * 1. buffered >= maxBufferedBytes: `close_buffer_limit`;
 * 2. buffered >= slowBufferBytes and congested continuously since
 *    `congestedSince` for longer than maxCongestedMs (strictly: `now -
 *    congestedSince > maxCongestedMs`, and only when maxCongestedMs > 0):
 *    `close_congested`;
 * 3. buffered >= slowBufferBytes: `mailbox`; the congestion timer starts
 *    now if it was not running;
 * 4. else `send`, and the congestion timer stops (`congestedSince = -1`).
 * The closes leave the state as it was. Congestion is only seen when this
 * (or `onDrained`) is called: the timer runs from the first congested
 * observation. Answers for the buffer alone: a caller whose mailbox still
 * holds items must flush it (see `onDrained`) before sending, to keep order.
 */
export function decideOutbound(s: CongestionState, bufferedBytes: number, now: number, limits: OutboundLimits): Outbound {
  if (bufferedBytes >= limits.maxBufferedBytes) return 'close_buffer_limit';
  if (bufferedBytes >= limits.slowBufferBytes) {
    if (s.congestedSince < 0) s.congestedSince = now;
    else if (limits.maxCongestedMs > 0 && now - s.congestedSince > limits.maxCongestedMs) return 'close_congested';
    return 'mailbox';
  }
  s.congestedSince = -1;
  return 'send';
}

/**
 * On a drain notification: true when the socket may leave the slow lane
 * (buffered below the soft limit), and then the congestion timer stops; the
 * caller flushes the mailbox and rejoins the native topics in the same
 * synchronous block. False, state untouched, while still congested.
 */
export function onDrained(s: CongestionState, bufferedBytes: number, _now: number, limits: OutboundLimits): boolean {
  if (bufferedBytes >= limits.slowBufferBytes) return false;
  s.congestedSince = -1;
  return true;
}

/**
 * The soft limit actually used: `WS_SLOW_CLIENT_BUFFER_BYTES` forced to at
 * most half the hard limit (`floor(max / 2)`), so that a congested socket
 * has room to queue before it is closed. `clamped` says it had to be lowered
 * (the gateway logs that once at start).
 */
export function effectiveSlowBufferBytes(slow: number, max: number): { value: number; clamped: boolean } {
  const half = Math.floor(max / 2);
  return slow > half ? { value: half, clamped: true } : { value: slow, clamped: false };
}

/** One (topic, key) of a Coalescer, allocated once and then mutated. */
interface CoalesceSlot<T> {
  releasedAt: number;
  held: boolean;
  item: T | undefined;
}

/**
 * `WS_COALESCE_INTERVAL_MS` for one socket: keyed events of one (topic, key)
 * are released at most once per interval, newest wins.
 *
 * Guarantees, per (topic, key): two releases are at least `intervalMs`
 * apart; a released item is never older (in offer order) than one released
 * before it; the newest item offered is always released, by `offer` or by a
 * later `due` once its interval has passed; an item held and then replaced
 * is never released (it is superseded, silently).
 */
export class Coalescer<T> {
  /** topic, then key, to its slot: the last release, and the item held if any. */
  private readonly slots = new Map<string, Map<string, CoalesceSlot<T>>>();
  /** The slots holding an item, in the order they were first held. */
  private heldSlots: CoalesceSlot<T>[] = [];
  /** Earliest due time among `heldSlots`; recomputed lazily when `dirty`. */
  private nextDue = Infinity;
  private dirty = false;

  constructor(readonly intervalMs: number) {
    if (!(intervalMs > 0) || !Number.isFinite(intervalMs)) {
      throw new RangeError(`Coalescer intervalMs must be a finite number above 0, got ${intervalMs}`);
    }
  }

  /** Items held, waiting for `due`. */
  get size(): number {
    return this.heldSlots.length;
  }

  /**
   * True: send `item` now. That is when nothing of its (topic, key) was
   * released within the last interval (`now - lastRelease >= intervalMs`, or
   * never); `now` is recorded as the release, and an item still held for
   * that (topic, key) (already due, `due` not yet called) is dropped, being
   * older. False: `item` is held, replacing any item held for that (topic,
   * key) and keeping that (topic, key)'s place in `due`'s order; it becomes
   * due at lastRelease + intervalMs.
   */
  offer(topic: string, key: string, item: T, now: number): boolean {
    let keys = this.slots.get(topic);
    if (keys === undefined) {
      keys = new Map();
      this.slots.set(topic, keys);
    }
    const slot = keys.get(key);
    if (slot === undefined) {
      keys.set(key, { releasedAt: now, held: false, item: undefined });
      return true;
    }
    if (now - slot.releasedAt >= this.intervalMs) {
      slot.releasedAt = now;
      // Only when the caller's timer is late: rare, so a linear removal is fine.
      if (slot.held) {
        slot.held = false;
        slot.item = undefined;
        this.heldSlots.splice(this.heldSlots.indexOf(slot), 1);
        this.dirty = true;
      }
      return true;
    }
    slot.item = item;
    if (!slot.held) {
      slot.held = true;
      this.heldSlots.push(slot);
      const at = slot.releasedAt + this.intervalMs;
      if (at < this.nextDue) this.nextDue = at;
    }
    return false;
  }

  /**
   * Appends to `out` every held item whose interval has passed (last release
   * + intervalMs <= now), in the order their (topic, key) was first held,
   * records `now` as their release and forgets them. Items not yet due stay,
   * in their order.
   */
  due(now: number, out: T[]): void {
    const hs = this.heldSlots;
    if (hs.length === 0 || (!this.dirty && this.nextDue > now)) return;
    let kept = 0;
    let next = Infinity;
    for (let i = 0; i < hs.length; i++) {
      const slot = hs[i] as CoalesceSlot<T>;
      const at = slot.releasedAt + this.intervalMs;
      if (at <= now) {
        out.push(slot.item as T);
        slot.item = undefined;
        slot.held = false;
        slot.releasedAt = now;
      } else {
        hs[kept++] = slot;
        if (at < next) next = at;
      }
    }
    hs.length = kept;
    this.nextDue = next;
    this.dirty = false;
  }

  /** The earliest time a held item becomes due (arm the caller's timer for it), or undefined when nothing is held. */
  nextDueAt(): number | undefined {
    const hs = this.heldSlots;
    if (hs.length === 0) return undefined;
    if (this.dirty) {
      let next = Infinity;
      for (let i = 0; i < hs.length; i++) {
        const at = (hs[i] as CoalesceSlot<T>).releasedAt + this.intervalMs;
        if (at < next) next = at;
      }
      this.nextDue = next;
      this.dirty = false;
    }
    return this.nextDue;
  }

  /**
   * Drops the release records older than `olderThan` (release < olderThan),
   * except those of (topic, key)s with an item held, whose due time depends
   * on them. `forget(now - intervalMs)` changes no later answer: a record
   * that old already lets the next item through. Call it on a slow tick so
   * the records stay bounded by the (topic, key)s active within an interval.
   */
  forget(olderThan: number): void {
    for (const [topic, keys] of this.slots) {
      for (const [key, slot] of keys) {
        if (!slot.held && slot.releasedAt < olderThan) keys.delete(key);
      }
      if (keys.size === 0) this.slots.delete(topic);
    }
  }
}
