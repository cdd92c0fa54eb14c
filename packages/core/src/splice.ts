/**
 * Replay then live, with no gap and no duplicate: one topic's history read
 * spliced onto its live stream. Written once for the shard's join with
 * `since` and for RedisBroker's catch-up after a reconnect.
 *
 * The caller subscribes first, then reads the history after `since`, and
 * feeds every live event of the topic to `live` meanwhile and after. The
 * states:
 *
 * 1. Holding (after `hold()`): the read is out; live events are held.
 * 2. The read is in: `replay(events, emit)` emits the read's events after
 *    the last emitted id, in order; `release(emit)` then emits the held
 *    live events not covered by the read (durable ones only when their id
 *    is above the last emitted; events without an id always).
 * 3. Following: `live` returns Emit for a live event to hand on now, Drop
 *    for a durable one whose id is not above the last emitted (the read
 *    had it: with Redis the read and pub/sub come over two connections, so
 *    a message of an event the read returned may still be on its way).
 *    Once live delivery has reached the read's end (a durable live id at
 *    or above it), the result carries `SplicePast` too: every later live
 *    event is newer than anything replayed, and a caller may stop feeding
 *    the splice (the shard then puts the socket on the native lane).
 *    A caller that keeps feeding it (RedisBroker) keeps the dedupe.
 *
 * Live events must come in the topic's id order (the Broker contract);
 * history reads are sorted. Ids are `<ms>-<seq>` (@sluice/protocol's
 * event-id module). On the live path `live` parses the event's id once
 * (or takes it parsed, when one delivery feeds many splices) and allocates
 * nothing else, except while holding.
 */
import { compareEventIds, type EventId, parseEventId } from '@sluice/protocol';

/** What a splice needs of an event: its id, undefined for keyed and ephemeral events. */
export interface SpliceEvent {
  readonly id: string | undefined;
}

/** `live`'s answer, as bits: nothing set means held (the read is still out). */
export const SpliceHeld = 0;
/** The replay covered it: do not hand it on. */
export const SpliceDrop = 1;
/** Hand it on now. */
export const SpliceEmit = 2;
/** With Drop or Emit: live delivery has passed the replay's end; no later live event can be a duplicate. */
export const SplicePast = 4;

export class ReplaySplice<E extends SpliceEvent> {
  private held: E[] | undefined;
  private last: EventId;
  private lastString: string;
  /** The newest id the replay emitted, while live delivery has not reached it. */
  private end: EventId | undefined;
  /** The newest durable id seen live (held or followed), for whether live has reached the replay's end. */
  private liveMax: EventId | undefined;

  /**
   * `since` is the last id the consumer has: nothing at or below it is
   * emitted. A splice starts following (no replay pending): `hold()` starts
   * a replay.
   */
  constructor(since: string) {
    const s = parseEventId(since);
    if (s === undefined) throw new Error(`ReplaySplice: malformed event id ${JSON.stringify(since)}`);
    this.last = s;
    this.lastString = since;
  }

  /** The newest durable id emitted (or `since`): where a next read starts. */
  get lastId(): string {
    return this.lastString;
  }

  /** Whether a read is out and live events are being held. */
  get holding(): boolean {
    return this.held !== undefined;
  }

  /** Whether live delivery may still repeat an event the replay emitted. */
  get past(): boolean {
    return this.end === undefined;
  }

  /** A read after `lastId` is going out: hold live events until `replay`/`release`. Holding already: keeps what it holds. */
  hold(): void {
    this.held ??= [];
  }

  /**
   * A live event. `id` is `e.id` parsed, for a caller that feeds one
   * delivery to many splices (parsed once); omitted, it is parsed here.
   */
  live(e: E, id: EventId | undefined = e.id === undefined ? undefined : parseEventId(e.id)): number {
    if (id !== undefined && (this.liveMax === undefined || compareEventIds(id, this.liveMax) > 0)) this.liveMax = id;
    if (this.held !== undefined) {
      this.held.push(e);
      return SpliceHeld;
    }
    if (id === undefined) return this.end === undefined ? SpliceEmit | SplicePast : SpliceEmit;
    const past = this.passed(id) ? SplicePast : 0;
    if (compareEventIds(id, this.last) <= 0) return SpliceDrop | past;
    this.last = id;
    this.lastString = e.id!;
    return SpliceEmit | past;
  }

  /** The read is in: emits its events above the last emitted id, in order. Call `release` next. */
  replay(events: readonly E[], emit: (e: E) => void): void {
    for (const e of events) {
      if (e.id === undefined) continue;
      const id = parseEventId(e.id);
      if (id === undefined || compareEventIds(id, this.last) <= 0) continue;
      this.last = id;
      this.lastString = e.id;
      emit(e);
    }
    this.end = this.last;
  }

  /**
   * Ends the hold: emits the held live events the replay did not cover, in
   * the order they came, and returns whether live delivery has passed the
   * replay's end (`past`). Without a `replay` (the read failed) the end is
   * the last id emitted before. `seen` is the newest live id the caller
   * delivered before this splice was made, when it knows one (the shard's
   * last live id of the topic): it counts as live delivery too.
   */
  release(emit: (e: E) => void, seen?: string): boolean {
    const held = this.held;
    // Neither holding nor replayed: nothing to end.
    if (held === undefined && this.end === undefined) return true;
    this.held = undefined;
    this.end ??= this.last;
    if (held !== undefined) {
      for (const e of held) {
        if (e.id === undefined) {
          emit(e);
          continue;
        }
        const id = parseEventId(e.id);
        if (id !== undefined) {
          if (compareEventIds(id, this.last) <= 0) continue;
          this.last = id;
          this.lastString = e.id;
        }
        emit(e);
      }
    }
    if (seen !== undefined) {
      const s = parseEventId(seen);
      if (s !== undefined && (this.liveMax === undefined || compareEventIds(s, this.liveMax) > 0)) this.liveMax = s;
    }
    if (this.liveMax !== undefined) this.passed(this.liveMax);
    return this.end === undefined;
  }

  /** Whether `id`, seen live, reaches the replay's end; clears the end once it does. */
  private passed(id: EventId): boolean {
    if (this.end === undefined) return true;
    if (compareEventIds(id, this.end) < 0) return false;
    this.end = undefined;
    return true;
  }
}
