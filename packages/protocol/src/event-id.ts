/**
 * Event ids: the one module that reads, writes and orders them, used by core,
 * redis, the gateway and the SDK.
 *
 * An id is `<ms>-<seq>`, the format of Redis stream ids, so that the
 * in-memory history and the Redis one hand out ids a client cannot tell
 * apart. Within a topic ids strictly increase.
 */
import { EVENT_ID_PATTERN } from './frames.ts';

export interface EventId {
  readonly ms: number;
  readonly seq: number;
}

/** Parses `<ms>-<seq>`; undefined when malformed. */
export function parseEventId(id: string): EventId | undefined {
  const m = EVENT_ID_PATTERN.exec(id);
  return m ? { ms: Number(m[1]), seq: Number(m[2]) } : undefined;
}

export function formatEventId(id: EventId): string {
  return `${id.ms}-${id.seq}`;
}

export function compareEventIds(a: EventId, b: EventId): number {
  return a.ms !== b.ms ? a.ms - b.ms : a.seq - b.seq;
}

/**
 * Orders two ids as written (`10-0` after `9-0`). An id that does not parse
 * sorts as unknown: `undefined`.
 */
export function compareEventIdStrings(a: string, b: string): number | undefined {
  const x = parseEventId(a);
  const y = parseEventId(b);
  if (x === undefined || y === undefined) return undefined;
  return compareEventIds(x, y);
}

/**
 * The time part of an id (the clock's ms when the event was stored), read
 * without a substring or an allocation: it runs per delivered event. 0
 * without an id.
 */
export function eventIdMs(id: string | undefined): number {
  if (id === undefined) return 0;
  let ms = 0;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i) - 48;
    if (c < 0 || c > 9) break;
    ms = ms * 10 + c;
  }
  return ms;
}

/** The id after `last` at time `now`: the clock's ms when it moved on, else the next seq. */
export function nextEventId(last: EventId | undefined, now: number): EventId {
  if (last === undefined || now > last.ms) return { ms: now, seq: 0 };
  return { ms: last.ms, seq: last.seq + 1 };
}
