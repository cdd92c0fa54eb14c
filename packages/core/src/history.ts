import { compareEventIds, type EventId, formatEventId } from '@sluice/protocol';
import { MapPass } from './map-pass.ts';

export interface StoredEvent {
  readonly id: string;
  /** The encoded `event` frame, sent as is on replay. */
  readonly frame: string;
}

export interface HistoryRead {
  /**
   * Oldest first: every stored event after `since`, or the first `limit`
   * of them; without `since`, the newest `limit` stored events.
   */
  readonly events: StoredEvent[];
  /**
   * With `since`: true when no event after `since` has been trimmed (by size
   * or age), so that `events` and the events after its last one are
   * complete; false when the client must refetch its state. A `limit` that
   * cut the answer short does not make it false: the reader goes on from
   * the last id.
   *
   * Without `since`: true when `events` holds every event stored from
   * `now - ttl` on, the oldest the history vouches for (none trimmed by
   * size, none lost before the history began, none left out by `limit`):
   * the same answer as for a `since` just before `now - ttl`, and false as
   * well when `limit` left some out.
   */
  readonly recovered: boolean;
}

/** A topic's byte ring starts at this size (and never shrinks below it); it grows as events need. */
const MIN_BYTES = 256;
/** The arrays of a log that never had an event; never written. */
const NONE = Object.freeze([]) as unknown as number[];
/** The bytes an event's frame of `len` bytes takes in its ring. */
const span = (len: number): number => (len > 0 ? len : 1);

/**
 * One topic's events in a ring of parallel arrays, their frames' bytes in a
 * ring of their own outside the V8 heap. Ids are kept as numbers (unboxed in
 * double arrays) and formatted on read; a frame is written as UTF-8 into the
 * topic's buffer and decoded again on read (reads are joins with `since` and
 * history requests; appends are every durable publish). So a stored event
 * costs the garbage collector nothing: a frame kept as a string outlived
 * the young generation, was copied into the old one and later swept there
 * (S1 at 1 KB did 18% more with WS_HISTORY_SIZE=10 before this). The frame
 * string given to `append` is the one delivered now, and dies young.
 *
 * The bytes of the events from `head` on lie one after another from the
 * head event's offset, wrapping to 0 once; a frame never straddles the end.
 * With the head event at offset h and the next write at `tail`: tail > h
 * when not wrapped (free: tail..end, then 0..h), tail <= h when wrapped
 * (free: tail..h). An empty frame takes one byte (`span`), so that every
 * event has bytes and tail = h means full. Exported for its tests only (not
 * from the package).
 *
 * Frames are kept as UTF-8: a string with a lone surrogate reads back with
 * U+FFFD in its place (as a WebSocket text frame would carry it). The
 * gateway's frames are JSON.stringify's output, which never has one.
 */
export class TopicLog {
  // One empty array shared by every log until its first event (push grows
  // before it writes): a topic that only ever had positions (a socket's own
  // topic, a keyed feed) costs no arrays of its own.
  ms: number[] = NONE;
  seq: number[] = NONE;
  off: number[] = NONE;
  len: number[] = NONE;
  bytes: Buffer | undefined;
  tail = 0;
  /** Bytes of the stored frames (to shrink a buffer that emptied). */
  held = 0;
  head = 0;
  size = 0;
  lastMs = -1;
  lastSeq = 0;
  /** The last id was handed out by `position` or `mark` (no event appended since): a later position may move it to its own time. */
  positional = false;
  /** The newest id that may have been trimmed: ids at or below it may be missing. */
  floorMs: number;
  floorSeq: number;
  constructor(floor: EventId) {
    this.floorMs = floor.ms;
    this.floorSeq = floor.seq;
  }
  get last(): EventId | undefined {
    return this.lastMs < 0 ? undefined : { ms: this.lastMs, seq: this.lastSeq };
  }
  slot(i: number): number {
    return (this.head + i) % this.ms.length;
  }
  frame(at: number): string {
    return this.bytes!.toString('utf8', this.off[at]!, this.off[at]! + this.len[at]!);
  }
  push(ms: number, seq: number, frame: string, max: number): void {
    if (this.size === this.ms.length) {
      if (this.size >= max) this.dropOldest();
      else this.grow(Math.min(max, Math.max(8, this.size * 2)));
    }
    const at = this.slot(this.size);
    // A frame takes at most 3 bytes a UTF-16 unit: room for that is looked
    // for first, without counting; only when there is none are its bytes
    // counted, so that a buffer grows for what the frame takes, not 3 times it.
    let bound = frame.length * 3;
    let offset = this.fit(span(bound));
    if (offset < 0) {
      bound = Buffer.byteLength(frame, 'utf8');
      offset = this.fit(span(bound));
      if (offset < 0) offset = this.growFor(span(bound));
    }
    const written = bound === 0 ? 0 : this.bytes!.write(frame, offset, bound, 'utf8');
    this.ms[at] = ms;
    this.seq[at] = seq;
    this.off[at] = offset;
    this.len[at] = written;
    this.tail = offset + span(written);
    this.held += span(written);
    this.size++;
  }
  dropOldest(): void {
    const at = this.head;
    this.floorMs = this.ms[at]!;
    this.floorSeq = this.seq[at]!;
    this.held -= span(this.len[at]!);
    this.head = (this.head + 1) % this.ms.length;
    this.size--;
    if (this.size === 0) this.tail = 0;
  }
  /**
   * The sweep's: drops the bytes of a log that emptied, and halves a buffer
   * more than 8 times its frames' bytes (so that the half still has room for
   * 3 times them: halving and growing again cannot take turns).
   */
  compact(): void {
    if (this.bytes === undefined) return;
    if (this.size === 0) this.bytes = undefined;
    else if (this.held * 8 < this.bytes.length && this.bytes.length > MIN_BYTES) this.relayout(Math.max(MIN_BYTES, this.bytes.length >>> 1));
  }
  /** The offset of `n` (>= 1) contiguous free bytes, or -1 when there are not. */
  private fit(n: number): number {
    const cap = this.bytes?.length ?? 0;
    if (this.size === 0) return n <= cap ? 0 : -1;
    const h = this.off[this.head]!;
    if (this.tail > h) {
      if (cap - this.tail >= n) return this.tail;
      if (h >= n) return 0;
    } else if (h - this.tail >= n) {
      return this.tail;
    }
    return -1;
  }
  /** Grows the buffer (at least doubling it) so that `n` bytes follow the stored frames; returns their offset. */
  private growFor(n: number): number {
    const cap = this.bytes?.length ?? 0;
    const capacity = Math.max(MIN_BYTES, cap * 2, this.held + 2 * n);
    if (this.size === 0) {
      this.bytes = Buffer.allocUnsafeSlow(capacity);
      return 0;
    }
    this.relayout(capacity);
    return this.tail;
  }
  /** Moves the stored frames, oldest first, to the start of a buffer of `capacity` bytes. */
  private relayout(capacity: number): void {
    const from = this.bytes!;
    const to = Buffer.allocUnsafeSlow(capacity);
    let w = 0;
    for (let i = 0; i < this.size; i++) {
      const at = this.slot(i);
      from.copy(to, w, this.off[at]!, this.off[at]! + this.len[at]!);
      this.off[at] = w;
      w += span(this.len[at]!);
    }
    this.bytes = to;
    this.tail = w;
  }
  private grow(capacity: number): void {
    const ms: number[] = new Array<number>(capacity).fill(0);
    const seq: number[] = new Array<number>(capacity).fill(0);
    const off: number[] = new Array<number>(capacity).fill(0);
    const len: number[] = new Array<number>(capacity).fill(0);
    for (let i = 0; i < this.size; i++) {
      const at = this.slot(i);
      ms[i] = this.ms[at]!;
      seq[i] = this.seq[at]!;
      off[i] = this.off[at]!;
      len[i] = this.len[at]!;
    }
    this.ms = ms;
    this.seq = seq;
    this.off = off;
    this.len = len;
    this.head = 0;
  }
}

const cmp = (aMs: number, aSeq: number, bMs: number, bSeq: number): number => (aMs !== bMs ? aMs - bMs : aSeq - bSeq);

/**
 * Bounded, expiring per-topic history: the embedded default, and the model
 * the Redis stream history follows. Guarantees:
 * - ids strictly increase within a topic (`<ms>-<seq>`, see event-id.ts);
 * - a topic keeps at most `maxEvents` events, none older than `ttlMs`;
 * - `read` reports `recovered: false` whenever an event after `since` may
 *   have been trimmed, including when the whole topic expired; a log only
 *   vouches for ids from (its creation - ttl - tombstone) on (a forgotten
 *   log's events are all older), so a `since` older than that answers false
 *   too;
 * - a clock that steps back is treated as standing still.
 * Time is handed in by the caller; nothing here reads a clock.
 */
export class MemoryHistory {
  private readonly topics = new Map<string, TopicLog>();
  private readonly sweepPass = new MapPass(this.topics);
  /** The latest time seen: a wall clock that steps back must not reorder ids or trim less. */
  private highest = 0;

  constructor(
    private readonly maxEvents: number,
    private readonly ttlMs: number,
    /** How long an emptied topic's last id is remembered after its TTL. */
    private readonly tombstoneMs: number = Math.max(ttlMs, 3_600_000),
    /**
     * When this history began. It vouches for nothing before: after a
     * restart, a `since` from the previous life answers `recovered: false`.
     */
    private readonly startedAt: number = 0,
  ) {}

  /**
   * Appends an event; `encode(arg, id)` builds its frame from the id it was
   * given (a static function and its argument: no closure per event).
   * Returns the stored event.
   */
  append<A>(topic: string, clock: number, encode: (arg: A, id: string) => string, arg: A): StoredEvent {
    const now = this.monotonic(clock);
    let log = this.topics.get(topic);
    if (log === undefined) {
      log = new TopicLog(this.creationFloor(now));
      this.topics.set(topic, log);
    }
    this.trimAge(log, now);
    if (now > log.lastMs) {
      log.lastMs = now;
      log.lastSeq = 0;
    } else {
      log.lastSeq++;
    }
    log.positional = false;
    const id = `${log.lastMs}-${log.lastSeq}`;
    const frame = encode(arg, id);
    if (this.maxEvents === 0) {
      log.floorMs = log.lastMs;
      log.floorSeq = log.lastSeq;
    } else {
      log.push(log.lastMs, log.lastSeq, frame, this.maxEvents);
    }
    return { id, frame };
  }

  /**
   * The events after `since`, at most `limit` (the oldest of them); without
   * `since`, the newest `limit` events. See HistoryRead for `recovered`.
   */
  read(topic: string, since: EventId | undefined, clock: number, limit: number = Number.POSITIVE_INFINITY): HistoryRead {
    const now = this.monotonic(clock);
    // Without since the read vouches from now - ttl on: as a since just before
    // it. Every event still stored is after it (trimAge below).
    const from = since ?? { ms: now - this.ttlMs - 1, seq: Number.MAX_SAFE_INTEGER };
    const log = this.topics.get(topic);
    if (log === undefined) {
      return { events: [], recovered: compareEventIds(from, this.creationFloor(now)) >= 0 };
    }
    this.trimAge(log, now);
    let start = log.size;
    while (start > 0 && cmp(log.ms[log.slot(start - 1)]!, log.seq[log.slot(start - 1)]!, from.ms, from.seq) > 0) start--;
    let end = log.size;
    const cut = end - start > limit;
    if (cut && since === undefined) start = end - limit;
    else if (cut) end = start + limit;
    const events: StoredEvent[] = [];
    for (let i = start; i < end; i++) {
      const at = log.slot(i);
      events.push({ id: `${log.ms[at]}-${log.seq[at]}`, frame: log.frame(at) });
    }
    const trimmed = cmp(from.ms, from.seq, log.floorMs, log.floorSeq) < 0;
    return { events, recovered: !trimmed && !(cut && since === undefined) };
  }

  /**
   * The topic's position now: an id that every event appended later is
   * above, and that a `since` of recovers from as long as nothing after it
   * is trimmed. Its newest id (kept after its events expired, for as long as
   * the tombstone); for a topic with none yet, `<now>-0` is taken as if an
   * event had been given it (none is stored), so the next append in this ms
   * gets `<now>-1`, and the topic's (empty) log vouches for it.
   */
  position(topic: string, clock: number): string {
    const log = this.topics.get(topic);
    const last = log?.last;
    // A topic with events (or a tombstone of them) stands at its newest id.
    // One that only ever had positions stands at now: no event lies between
    // the last position and now, and the log is then kept (see sweep) for
    // ttl + tombstone after this position, as Redis keeps none and vouches
    // from its own clock.
    if (last !== undefined && log?.positional !== true) return formatEventId(last);
    return this.mark(topic, clock);
  }

  /**
   * A position at now for any topic (WS_POSITION_REFRESH_MS): the newer of
   * its newest id and `<now>-0`, taken as if an event had been given it
   * (none is stored: the next append gets a higher id, and the log is kept
   * for ttl + tombstone after it, as after an event). A `since` of it
   * recovers as long as nothing after it is trimmed, however old the
   * topic's last event.
   */
  mark(topic: string, clock: number): string {
    const now = this.monotonic(clock);
    let log = this.topics.get(topic);
    if (log === undefined) {
      log = new TopicLog(this.creationFloor(now));
      this.topics.set(topic, log);
    }
    if (now > log.lastMs) {
      log.lastMs = now;
      log.lastSeq = 0;
    }
    log.positional = true;
    return formatEventId(log.last!);
  }

  /** The ms of a topic's newest id or mark (its last append, position or `mark`); -1 when it has none. */
  lastAt(topic: string): number {
    return this.topics.get(topic)?.lastMs ?? -1;
  }

  /** The newest id of a topic, if it has one. */
  lastId(topic: string): string | undefined {
    const last = this.topics.get(topic)?.last;
    return last === undefined ? undefined : formatEventId(last);
  }

  get topicCount(): number {
    return this.topics.size;
  }

  /** Trims expired events of up to `budget` topics and forgets topics with nothing left to protect. */
  sweep(clock: number, budget: number): void {
    const now = this.monotonic(clock);
    this.sweepPass.next(budget, (topic, log) => {
      this.trimAge(log, now);
      log.compact();
      // An emptied topic is kept as a tombstone (its last id and floor) for a
      // while, so that clients whose `since` is its last id still recover
      // after the events expired. Once forgotten, the creation floor of a new
      // log covers everything it held, because its newest id is past the TTL.
      if (log.size === 0 && log.lastMs < now - this.ttlMs - this.tombstoneMs) {
        this.topics.delete(topic);
      }
    });
  }

  private monotonic(clock: number): number {
    if (clock > this.highest) this.highest = clock;
    return this.highest;
  }

  private trimAge(log: TopicLog, now: number): void {
    const oldest = now - this.ttlMs;
    while (log.size > 0 && log.ms[log.head]! < oldest) log.dropOldest();
  }

  /**
   * What a brand-new log may be missing: a log is forgotten (sweep) only
   * once its newest id is below (sweep time - ttl - tombstone), and sweep
   * time <= now, so no event at or above (now - ttl - tombstone) can have
   * been lost before this log existed; nor anything before the history
   * started, which it cannot know about.
   */
  private creationFloor(now: number): EventId {
    return { ms: Math.max(now - this.ttlMs - this.tombstoneMs, this.startedAt) - 1, seq: Number.MAX_SAFE_INTEGER };
  }
}
