/**
 * Event ids are `<ms>-<seq>`, the format of Redis stream ids, so that the
 * in-memory history and the Redis one hand out ids a client cannot tell apart.
 * Within a topic ids strictly increase.
 */
export interface EventId {
  readonly ms: number;
  readonly seq: number;
}

export function formatEventId(id: EventId): string {
  return `${id.ms}-${id.seq}`;
}

export function compareEventIds(a: EventId, b: EventId): number {
  return a.ms !== b.ms ? a.ms - b.ms : a.seq - b.seq;
}

/** The id after `last` at time `now`: the clock's ms when it moved on, else the next seq. */
export function nextEventId(last: EventId | undefined, now: number): EventId {
  if (last === undefined || now > last.ms) return { ms: now, seq: 0 };
  return { ms: last.ms, seq: last.seq + 1 };
}
