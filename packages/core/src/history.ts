import { compareEventIds, type EventId, formatEventId, nextEventId } from './event-id.ts';

export interface StoredEvent {
  readonly id: string;
  /** The encoded `event` frame, sent as is on replay. */
  readonly frame: string;
}

export interface HistoryRead {
  /** Every stored event after `since`, oldest first. */
  readonly events: StoredEvent[];
  /**
   * True when no event after `since` has been trimmed (by size or age), so
   * `events` is complete; false when the client must refetch its state.
   */
  readonly recovered: boolean;
}

interface Entry extends EventId {
  readonly id: string;
  readonly frame: string;
}

class TopicLog {
  entries: Entry[] = [];
  head = 0;
  last: EventId | undefined;
  /** The newest id that may have been trimmed: ids at or below it may be missing. */
  floor: EventId;
  constructor(floor: EventId) {
    this.floor = floor;
  }
  get size(): number {
    return this.entries.length - this.head;
  }
  dropOldest(): void {
    const e = this.entries[this.head]!;
    this.floor = e;
    this.head++;
    if (this.head > 64 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
  }
}

/**
 * Bounded, expiring per-topic history: the embedded default, and the model
 * the Redis stream history follows. Guarantees:
 * - ids strictly increase within a topic (`<ms>-<seq>`, see event-id.ts);
 * - a topic keeps at most `maxEvents` events, none older than `ttlMs`;
 * - `read` reports `recovered: false` whenever an event after `since` may
 *   have been trimmed, including when the whole topic expired; a log only
 *   vouches for ids from (its creation - ttl) on, so a `since` older than
 *   that answers false too;
 * - a clock that steps back is treated as standing still.
 * Time is handed in by the caller; nothing here reads a clock.
 */
export class MemoryHistory {
  private readonly topics = new Map<string, TopicLog>();
  private sweepCursor: Iterator<[string, TopicLog]> | undefined;
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
    const next = nextEventId(log.last, now);
    log.last = next;
    const id = formatEventId(next);
    const entry: Entry = { ms: next.ms, seq: next.seq, id, frame: encode(arg, id) };
    if (this.maxEvents === 0) {
      log.floor = entry;
      return entry;
    }
    log.entries.push(entry);
    while (log.size > this.maxEvents) log.dropOldest();
    return entry;
  }

  read(topic: string, since: EventId, clock: number): HistoryRead {
    const now = this.monotonic(clock);
    const log = this.topics.get(topic);
    if (log === undefined) {
      return { events: [], recovered: compareEventIds(since, this.creationFloor(now)) >= 0 };
    }
    this.trimAge(log, now);
    const events: StoredEvent[] = [];
    let i = log.entries.length;
    while (i > log.head && compareEventIds(log.entries[i - 1]!, since) > 0) i--;
    for (; i < log.entries.length; i++) {
      const e = log.entries[i]!;
      events.push({ id: e.id, frame: e.frame });
    }
    return { events, recovered: compareEventIds(since, log.floor) >= 0 };
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
    for (let n = 0; n < budget; n++) {
      this.sweepCursor ??= this.topics.entries();
      const step = this.sweepCursor.next();
      if (step.done === true) {
        this.sweepCursor = undefined;
        return;
      }
      const [topic, log] = step.value;
      this.trimAge(log, now);
      // An emptied topic is kept as a tombstone (its last id and floor) for a
      // while, so that clients whose `since` is its last id still recover
      // after the events expired. Once forgotten, the creation floor of a new
      // log covers everything it held, because its newest id is past the TTL.
      if (log.size === 0 && (log.last === undefined || log.last.ms < now - this.ttlMs - this.tombstoneMs)) {
        this.topics.delete(topic);
      }
    }
  }

  private monotonic(clock: number): number {
    if (clock > this.highest) this.highest = clock;
    return this.highest;
  }

  private trimAge(log: TopicLog, now: number): void {
    const oldest = now - this.ttlMs;
    while (log.size > 0 && log.entries[log.head]!.ms < oldest) log.dropOldest();
  }

  /**
   * What a brand-new log may be missing: an event is trimmed for age only
   * when its ms is below (trim time - ttl), and trim time <= now, so nothing
   * at or above (now - ttl) can have been lost before the log existed.
   */
  private creationFloor(now: number): EventId {
    return { ms: Math.max(now - this.ttlMs, this.startedAt) - 1, seq: Number.MAX_SAFE_INTEGER };
  }
}
