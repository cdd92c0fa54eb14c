import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseEventId } from '@sluice/protocol';
import { compareEventIds, formatEventId } from '@sluice/protocol';
import type { EventId } from '@sluice/protocol';
import { MemoryHistory, TopicLog } from '../src/history.ts';
import type { HistoryRead } from '../src/history.ts';

const T0 = 1_732_900_000_000;
const frameOf = (topic: string, id: string): string => `${topic}|${id}`;
const idOf = (s: string): EventId => {
  const id = parseEventId(s);
  assert.ok(id, `malformed id ${s}`);
  return id;
};
const since = (s: string): EventId => idOf(s);
const ids = (r: HistoryRead): string[] => r.events.map((e) => e.id);

function appendAt(h: MemoryHistory, topic: string, now: number): string {
  return h.append(topic, now, frameOf, topic).id;
}

describe('MemoryHistory: examples', () => {
  test('replays every event after since, oldest first, with the frame built from its id', () => {
    const h = new MemoryHistory(10, 60_000);
    const a = appendAt(h, 't', T0);
    const b = appendAt(h, 't', T0);
    const c = appendAt(h, 't', T0 + 5);
    assert.deepEqual([a, b, c], [`${T0}-0`, `${T0}-1`, `${T0 + 5}-0`]);
    const r = h.read('t', idOf(a), T0 + 10);
    assert.deepEqual(r.events, [{ id: b, frame: frameOf('t', b) }, { id: c, frame: frameOf('t', c) }]);
    assert.equal(r.recovered, true);
    assert.deepEqual(h.read('t', idOf(c), T0 + 10), { events: [], recovered: true });
  });

  test('a client whose since predates an event trimmed by size is told recovered=false', () => {
    const h = new MemoryHistory(2, 60_000);
    const [e0, e1, e2] = [appendAt(h, 't', T0), appendAt(h, 't', T0 + 1), appendAt(h, 't', T0 + 2)];
    assert.deepEqual(ids(h.read('t', since('0-0'), T0 + 3)), [e1, e2]);
    assert.equal(h.read('t', since('0-0'), T0 + 3).recovered, false);
    assert.equal(h.read('t', idOf(e0), T0 + 3).recovered, true, 'nothing after e0 was trimmed');
    assert.equal(h.read('t', { ms: T0, seq: 1 }, T0 + 3).recovered, true, 'an id between e0 and e1 lost nothing');
  });

  test('events older than ttl are not replayed; an event exactly ttl old still is', () => {
    const h = new MemoryHistory(10, 1000);
    const e0 = appendAt(h, 't', T0);
    const e1 = appendAt(h, 't', T0 + 500);
    assert.deepEqual(ids(h.read('t', since('0-0'), T0 + 1000)), [e0, e1]);
    const r = h.read('t', since('0-0'), T0 + 1001);
    assert.deepEqual(ids(r), [e1]);
    assert.equal(r.recovered, false);
    assert.equal(h.read('t', idOf(e0), T0 + 1001).recovered, true);
  });

  test('ids strictly increase per topic, and topics have their own sequences', () => {
    const h = new MemoryHistory(3, 1000);
    const seen = new Map<string, string>();
    for (let i = 0; i < 100; i++) {
      const topic = i % 3 === 0 ? 'a' : 'b';
      const id = appendAt(h, topic, T0 + Math.floor(i / 7));
      const prev = seen.get(topic);
      if (prev !== undefined) assert.ok(compareEventIds(idOf(id), idOf(prev)) > 0, `${id} after ${prev}`);
      seen.set(topic, id);
    }
    assert.equal(appendAt(h, 'c', T0 + 14), `${T0 + 14}-0`, 'a new topic starts at seq 0 even in a millisecond other topics used');
  });

  test('lastId is the newest id handed out', () => {
    const h = new MemoryHistory(1, 1000);
    assert.equal(h.lastId('t'), undefined);
    appendAt(h, 't', T0);
    const b = appendAt(h, 't', T0);
    assert.equal(h.lastId('t'), b);
  });

  test('position: the newest id; for a topic with none, an id the next append (same ms) is above, vouched for even in the ms the history began', () => {
    const h = new MemoryHistory(10, 60_000, undefined, T0);
    const p = h.position('t', T0);
    assert.equal(p, `${T0}-0`);
    const next = appendAt(h, 't', T0);
    assert.ok(compareEventIds(idOf(next), idOf(p)) > 0, `${next} above ${p}`);
    const r = h.read('t', idOf(p), T0 + 1);
    assert.deepEqual([r.events.map((e) => e.id), r.recovered], [[next], true]);
    assert.equal(h.position('t', T0 + 5), next, 'the newest id');
    // A clock that stepped back: still below what comes next.
    const q = h.position('u', T0 - 100);
    assert.ok(compareEventIds(idOf(appendAt(h, 'u', T0 - 200)), idOf(q)) > 0);
    assert.deepEqual(h.read('t', idOf(next), T0 + 2), { events: [], recovered: true });
  });

  test('maxEvents=0 stores nothing but still hands out increasing ids, and says when a since is out of reach', () => {
    const h = new MemoryHistory(0, 60_000);
    let prev: string | undefined;
    for (let i = 0; i < 20; i++) {
      const id = appendAt(h, 't', T0 + Math.floor(i / 3));
      if (prev !== undefined) assert.ok(compareEventIds(idOf(id), idOf(prev)) > 0);
      prev = id;
    }
    assert.deepEqual(h.read('t', since('0-0'), T0 + 10), { events: [], recovered: false });
    assert.deepEqual(h.read('t', idOf(prev!), T0 + 10), { events: [], recovered: true });
  });

  test('a topic the history never saw recovers a since younger than ttl + tombstone, not an older one', () => {
    // Documented caveat: the history cannot tell "never had events" from "expired and forgotten",
    // and it forgets a topic only once its newest event is older than ttl + tombstone.
    const h = new MemoryHistory(10, 1000, 5000);
    assert.deepEqual(h.read('nope', { ms: T0 - 6000, seq: 0 }, T0), { events: [], recovered: true });
    assert.deepEqual(h.read('nope', { ms: T0 - 6001, seq: 0 }, T0), { events: [], recovered: false });
  });

  test('a new topic carries the same caveat: a since older than ttl + tombstone before its first event is not recovered', () => {
    const h = new MemoryHistory(10, 1000, 5000);
    const e = appendAt(h, 't', T0);
    assert.deepEqual(h.read('t', { ms: T0 - 6000, seq: 0 }, T0), { events: [{ id: e, frame: frameOf('t', e) }], recovered: true });
    assert.equal(h.read('t', { ms: T0 - 6001, seq: 0 }, T0).recovered, false);
  });

  test('a topic forgotten by the sweep and written again: a since between its old events is not recovered', () => {
    const h = new MemoryHistory(10, 1000, 5000);
    const seen = appendAt(h, 't', T0);
    appendAt(h, 't', T0 + 1);
    h.sweep(T0 + 6002, 10);
    assert.equal(h.lastId('t'), undefined, 'forgotten once its newest event is older than ttl + tombstone');
    const e = appendAt(h, 't', T0 + 6002);
    assert.deepEqual(h.read('t', idOf(seen), T0 + 6002), { events: [{ id: e, frame: frameOf('t', e) }], recovered: false });
  });

  test('on a topic that never had an event, each position is the time it was taken, vouched for ttl + tombstone after it', () => {
    const h = new MemoryHistory(10, 1000, 5000);
    assert.equal(h.position('feed', T0), `${T0}-0`);
    const late = h.position('feed', T0 + 5000);
    assert.equal(late, `${T0 + 5000}-0`, 'a later subscriber stands at its own time');
    h.sweep(T0 + 10_500, 10);
    assert.deepEqual(h.read('feed', idOf(late), T0 + 10_500), { events: [], recovered: true }, 'kept for ttl + tombstone after the last position');
    const e = appendAt(h, 'feed', T0 + 10_500);
    assert.equal(e, `${T0 + 10_500}-0`);
    assert.equal(h.position('feed', T0 + 10_600), e, 'with an event, the position is its newest id');
    const h2 = new MemoryHistory(10, 1000, 5000);
    h2.position('y', T0 + 2);
    assert.equal(appendAt(h2, 'y', T0 + 2), `${T0 + 2}-1`, 'an event in the ms of a position is above it');
  });

  test('a position taken on a topic with no event vouches for itself for ttl + tombstone (a keyed-only feed)', () => {
    const h = new MemoryHistory(10, 1000, 5000);
    const p = h.position('feed', T0);
    h.sweep(T0 + 5999, 10);
    assert.deepEqual(h.read('feed', idOf(p), T0 + 5999), { events: [], recovered: true }, 'past the ttl, within the tombstone');
    h.sweep(T0 + 6001, 10);
    assert.deepEqual(h.read('feed', idOf(p), T0 + 6001), { events: [], recovered: false }, 'forgotten');
  });

  test('marks keep a quiet topic resumable past ttl + tombstone: the join position expires, the newest mark does not', () => {
    // ttl 1 s, tombstone 5 s: a position is vouched for 6 s after it.
    const h = new MemoryHistory(10, 1000, 5000);
    const joined = h.position('feed', T0);
    const marks: string[] = [];
    // A mark every 3 s (WS_POSITION_REFRESH_MS below ttl + tombstone), the sweep running between them.
    for (let t = T0 + 3000; t <= T0 + 30_000; t += 3000) {
      h.sweep(t, 10);
      marks.push(h.mark('feed', t));
      assert.equal(h.lastAt('feed'), t, 'a mark is the topic\'s newest time');
    }
    assert.deepEqual(marks, marks.map((_, i) => `${T0 + 3000 * (i + 1)}-0`), 'each mark stands at its own time');
    h.sweep(T0 + 32_000, 10);
    assert.deepEqual(h.read('feed', idOf(marks.at(-1)!), T0 + 32_000), { events: [], recovered: true }, 'the newest mark is vouched for');
    // The log was kept all along (each mark renews it), so it knows nothing
    // came since the join; Redis keeps no stream for such a topic and
    // vouches for the last keep only: there the mark is what recovers.
    assert.equal(h.read('feed', idOf(joined), T0 + 32_000).recovered, true, 'in memory the join position too');
    const unmarked = new MemoryHistory(10, 1000, 5000);
    const alone = unmarked.position('feed', T0);
    unmarked.sweep(T0 + 32_000, 10);
    assert.equal(unmarked.read('feed', idOf(alone), T0 + 32_000).recovered, false, 'without marks the log is forgotten');
    const e = appendAt(h, 'feed', T0 + 32_000);
    assert.deepEqual(ids(h.read('feed', idOf(marks.at(-1)!), T0 + 32_000)), [e], 'an event after a mark replays from it');
  });

  test('a mark on a topic with events stands at now, above its newest event, and the next event in its ms is above it', () => {
    const h = new MemoryHistory(10, 60_000, 5000);
    const a = appendAt(h, 't', T0);
    assert.equal(h.position('t', T0 + 10), a, 'a join stands at the newest event');
    const m = h.mark('t', T0 + 10);
    assert.equal(m, `${T0 + 10}-0`);
    assert.equal(h.mark('t', T0 + 10), m, 'twice in one ms: the same mark');
    assert.equal(h.position('t', T0 + 20), `${T0 + 20}-0`, 'no event since the mark: a join stands at now too');
    const b = appendAt(h, 't', T0 + 20);
    assert.equal(b, `${T0 + 20}-1`, 'an event in the ms of a mark is above it');
    assert.equal(h.mark('t', T0 + 20), b, 'a mark in the ms of the newest event is that event');
    assert.equal(h.mark('t', T0 + 5), b, 'a clock that stepped back marks at the newest id');
    assert.deepEqual(ids(h.read('t', idOf(m), T0 + 30)), [b]);
    assert.equal(h.read('t', idOf(m), T0 + 30).recovered, true);
    assert.equal(h.lastAt('none'), -1);
  });

  test('a mark after the size trim still vouches for what follows it (history disabled: size 0)', () => {
    const h = new MemoryHistory(0, 60_000, 5000);
    const a = appendAt(h, 't', T0);
    assert.equal(h.read('t', idOf(`${T0 - 1}-0`), T0 + 1).recovered, false, 'nothing is stored');
    const m = h.mark('t', T0 + 100);
    assert.notEqual(m, a);
    assert.deepEqual(h.read('t', idOf(m), T0 + 200), { events: [], recovered: true });
  });
});

describe('MemoryHistory: limit, and reads without since (the admin history read)', () => {
  test('with since, a limit answers the oldest events after it, and reading on from the last id gives the rest', () => {
    const h = new MemoryHistory(10, 60_000);
    const all = Array.from({ length: 5 }, (_, i) => appendAt(h, 't', T0 + i));
    const first = h.read('t', since(`${T0 - 1}-0`), T0 + 10, 2);
    assert.deepEqual(ids(first), all.slice(0, 2));
    assert.equal(first.recovered, true, 'a limit that cuts the answer short is not a loss');
    assert.deepEqual(ids(h.read('t', idOf(all[1]!), T0 + 10, 2)), all.slice(2, 4));
    assert.deepEqual(h.read('t', idOf(all[3]!), T0 + 10, 2), { events: [{ id: all[4]!, frame: frameOf('t', all[4]!) }], recovered: true });
  });

  test('without since, the newest limit events, oldest first; recovered only when none was left out', () => {
    const h = new MemoryHistory(10, 60_000);
    const all = Array.from({ length: 5 }, (_, i) => appendAt(h, 't', T0 + i));
    const newest = h.read('t', undefined, T0 + 10, 2);
    assert.deepEqual(ids(newest), all.slice(3));
    assert.equal(newest.recovered, false, 'three older events in the window were left out');
    assert.deepEqual(h.read('t', undefined, T0 + 10, 5), { events: all.map((id) => ({ id, frame: frameOf('t', id) })), recovered: true });
    assert.deepEqual(ids(h.read('t', undefined, T0 + 10)), all, 'no limit: every stored event');
  });

  test('without since, recovered is false once an event from now - ttl on was trimmed by size, true when only older ones expired', () => {
    const bySize = new MemoryHistory(2, 60_000);
    const kept = [0, 1, 2].map((i) => appendAt(bySize, 't', T0 + i)).slice(1);
    assert.deepEqual(bySize.read('t', undefined, T0 + 3, 100), { events: kept.map((id) => ({ id, frame: frameOf('t', id) })), recovered: false });

    const byAge = new MemoryHistory(10, 1000);
    appendAt(byAge, 't', T0);
    const young = appendAt(byAge, 't', T0 + 600);
    const r = byAge.read('t', undefined, T0 + 1001, 100);
    assert.deepEqual(ids(r), [young]);
    assert.equal(r.recovered, true, 'the expired event is older than the window the read vouches for');
  });

  test('without since, a history younger than ttl vouches for nothing: a shard restarted less than ttl ago may have lost events', () => {
    const started = T0 + 50_000;
    const h = new MemoryHistory(10, 60_000, undefined, started);
    const e = appendAt(h, 't', started + 10);
    assert.deepEqual(h.read('t', undefined, started + 20, 100), { events: [{ id: e, frame: frameOf('t', e) }], recovered: false });
    assert.deepEqual(h.read('never', undefined, started + 20, 100), { events: [], recovered: false });
    assert.equal(h.read('t', undefined, started + 60_000, 100).recovered, true, 'a ttl after the start, nothing older can be asked for');
    assert.deepEqual(h.read('never', undefined, started + 60_000, 100), { events: [], recovered: true });
  });
});

describe('MemoryHistory: sweep', () => {
  // These use tombstoneMs = 0 to pin the forget rule; the tombstone is tested on its own below.
  test('an emptied topic is remembered as a tombstone: a since at its last id still recovers after the events expired', () => {
    const h = new MemoryHistory(10, 1000);
    const e = appendAt(h, 't', T0);
    h.sweep(T0 + 5000, 10);
    assert.equal(h.lastId('t'), e, 'tombstone kept for max(ttl, 1 h)');
    assert.deepEqual(h.read('t', idOf(e), T0 + 5000), { events: [], recovered: true });
    h.sweep(T0 + 1000 + 3_600_001, 10);
    assert.equal(h.lastId('t'), undefined);
  });

  test('forgets a topic once its newest event is past the ttl, and keeps the others', () => {
    const h = new MemoryHistory(10, 1000, 0);
    appendAt(h, 'old', T0);
    appendAt(h, 'new', T0 + 500);
    h.sweep(T0 + 1000, 100);
    assert.equal(h.topicCount, 2, 'an event exactly ttl old is not expired');
    h.sweep(T0 + 1001, 100);
    assert.equal(h.topicCount, 1);
    assert.equal(h.lastId('old'), undefined);
    assert.notEqual(h.lastId('new'), undefined);
  });

  test('a topic with expired old events but a live newest one is trimmed, not forgotten', () => {
    const h = new MemoryHistory(10, 1000, 0);
    const e0 = appendAt(h, 't', T0);
    const e1 = appendAt(h, 't', T0 + 900);
    h.sweep(T0 + 1500, 100);
    assert.equal(h.lastId('t'), e1);
    const r = h.read('t', since('0-0'), T0 + 1500);
    assert.deepEqual(ids(r), [e1]);
    assert.equal(r.recovered, false);
    assert.equal(h.read('t', idOf(e0), T0 + 1500).recovered, true);
  });

  test('after the sweep, a client whose since predates an expired event gets recovered=false', () => {
    const h = new MemoryHistory(10, 1000, 0);
    const e0 = appendAt(h, 't', T0);
    appendAt(h, 't', T0 + 10);
    h.sweep(T0 + 2000, 100);
    assert.equal(h.topicCount, 0);
    assert.deepEqual(h.read('t', idOf(e0), T0 + 2000), { events: [], recovered: false });
    // And once the topic has new events, the since is still out of reach.
    const e2 = appendAt(h, 't', T0 + 2001);
    const r = h.read('t', idOf(e0), T0 + 2002);
    assert.deepEqual(ids(r), [e2]);
    assert.equal(r.recovered, false);
    assert.ok(compareEventIds(idOf(e2), idOf(e0)) > 0, 'ids keep increasing across the forget');
  });

  test('forgets every expired topic, a budget at a time', () => {
    const h = new MemoryHistory(10, 1000, 0);
    for (let i = 0; i < 50; i += 2) appendAt(h, `t${i}`, T0);
    for (let i = 1; i < 50; i += 2) appendAt(h, `t${i}`, T0 + 5000);
    for (let n = 0; n < 50 && h.topicCount > 25; n++) h.sweep(T0 + 5000, 3);
    assert.equal(h.topicCount, 25);
    for (let i = 0; i < 50; i++) assert.equal(h.lastId(`t${i}`) === undefined, i % 2 === 0, `t${i}`);
  });

  test('a maxEvents=0 topic is forgotten once its newest id is past the ttl', () => {
    const h = new MemoryHistory(0, 1000, 0);
    const e = appendAt(h, 't', T0);
    h.sweep(T0 + 1000, 10);
    assert.equal(h.lastId('t'), e);
    h.sweep(T0 + 1001, 10);
    assert.equal(h.lastId('t'), undefined);
  });
});

// The model: every event ever appended, with the time it was appended, and per topic the time at which
// the history's current log was created (undefined while the history does not know the topic).
// A read answers every event with id > since that is among the last maxEvents of the topic and no
// older than ttl; recovered is true exactly when none with id > since is missing, except for the
// documented caveat: what a log cannot know is whether events existed before it was created, so a
// since older than (creation time - ttl - tombstone) is not recovered (a forgotten log's newest event
// was older), and for an unknown topic creation is "now".
// Time steps and sinces are drawn partly relative to the ttl, so that the edges (an event exactly
// ttl old, a since exactly ttl before a log's creation) come up often.
type Dt = number | { readonly ttlPlus: number };
type Op =
  | { readonly kind: 'append'; readonly topic: string; readonly dt: Dt }
  | { readonly kind: 'read'; readonly topic: string; readonly dt: Dt; readonly since: SinceSpec; readonly limit: number | null }
  | { readonly kind: 'sweep'; readonly dt: Dt; readonly budget: number };
type SinceSpec =
  | { readonly kind: 'seen'; readonly pick: number; readonly dms: number; readonly dseq: number }
  | { readonly kind: 'ago'; readonly ago: Dt; readonly seq: number }
  /** Near the edge of what a new log vouches for: ttl + tombstone ago, give or take a ms or two. */
  | { readonly kind: 'keep'; readonly plus: number; readonly seq: number }
  | { readonly kind: 'zero' }
  /** No since: the newest `limit` events. */
  | { readonly kind: 'none' };

const TOPICS = ['a', 'b', 'c'];
const ttlPlus = fc.record({ ttlPlus: fc.integer({ min: -2, max: 2 }) });
const dtArb: fc.Arbitrary<Dt> = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 150 }), ttlPlus);
const resolve = (dt: Dt, ttl: number): number => (typeof dt === 'number' ? dt : Math.max(0, ttl + dt.ttlPlus));
const sinceArb: fc.Arbitrary<SinceSpec> = fc.oneof(
  fc.record({ kind: fc.constant('seen' as const), pick: fc.nat(), dms: fc.integer({ min: -1, max: 1 }), dseq: fc.integer({ min: -1, max: 1 }) }),
  fc.record({ kind: fc.constant('ago' as const), ago: fc.oneof(fc.integer({ min: -5, max: 200 }), ttlPlus), seq: fc.integer({ min: 0, max: 2 }) }),
  fc.record({ kind: fc.constant('keep' as const), plus: fc.integer({ min: -2, max: 2 }), seq: fc.integer({ min: 0, max: 2 }) }),
  fc.constant({ kind: 'zero' as const }),
  fc.constant({ kind: 'none' as const }),
);
const opArb = (dt: fc.Arbitrary<Dt>): fc.Arbitrary<Op> => fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('append' as const), topic: fc.constantFrom(...TOPICS), dt }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('read' as const), topic: fc.constantFrom(...TOPICS), dt, since: sinceArb,
    limit: fc.option(fc.integer({ min: 1, max: 5 })) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('sweep' as const), dt, budget: fc.integer({ min: 0, max: 4 }) }) },
);

interface ModelEvent {
  readonly id: EventId;
  readonly frame: string;
}

/** A since near an id already handed out (mostly of the topic read), some time ago, from the start, or none. */
function sinceFrom(spec: SinceSpec, own: readonly EventId[], seen: readonly EventId[], now: number, ttl: number, tombstone = Math.max(ttl, 3_600_000)): EventId | undefined {
  switch (spec.kind) {
    case 'keep':
      return { ms: now - ttl - tombstone + spec.plus, seq: spec.seq };
    case 'none':
      return undefined;
    case 'zero':
      return { ms: 0, seq: 0 };
    case 'ago':
      return { ms: now - (typeof spec.ago === 'number' ? spec.ago : ttl + spec.ago.ttlPlus), seq: spec.seq };
    case 'seen': {
      const pool = own.length > 0 && spec.pick % 4 !== 0 ? own : seen;
      const base = pool.length === 0 ? { ms: now, seq: 0 } : pool[spec.pick % pool.length]!;
      return { ms: base.ms + spec.dms, seq: Math.max(0, base.seq + spec.dseq) };
    }
  }
}

describe('MemoryHistory: against the model', () => {
  test('property: reads, ids, recovered and forgetting agree with the model (clock never goes back)', () => {
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 4 }), fc.integer({ min: 1, max: 60 }), fc.integer({ min: 0, max: 100 }), fc.array(opArb(dtArb), { maxLength: 80 }),
      (maxEvents, ttl, tombstone, ops) => {
        const h = new MemoryHistory(maxEvents, ttl, tombstone);
        const appended = new Map<string, ModelEvent[]>(TOPICS.map((t) => [t, []]));
        const createdAt = new Map<string, number | undefined>();
        const seen: EventId[] = [];
        let now = T0;
        for (const op of ops) {
          now += resolve(op.dt, ttl);
          if (op.kind === 'append') {
            let encodedWith: string | undefined;
            const id = h.append(op.topic, now, (t: string, i) => {
              encodedWith = i;
              return frameOf(t, i);
            }, op.topic).id;
            assert.equal(encodedWith, id, 'the frame is built from the id handed out');
            const parsed = idOf(id);
            const evs = appended.get(op.topic)!;
            const prev = evs.at(-1);
            if (prev !== undefined) assert.ok(compareEventIds(parsed, prev.id) > 0, `${id} after ${formatEventId(prev.id)}`);
            assert.equal(parsed.ms, now, 'with a clock that never goes back, the id carries the append time');
            evs.push({ id: parsed, frame: frameOf(op.topic, id) });
            seen.push(parsed);
            if (createdAt.get(op.topic) === undefined) createdAt.set(op.topic, now);
          } else if (op.kind === 'read') {
            const evs = appended.get(op.topic)!;
            const s = sinceFrom(op.since, evs.map((e) => e.id), seen, now, ttl, tombstone);
            const limit = op.limit ?? undefined;
            const kept = evs.filter((e, i) => i >= evs.length - maxEvents && e.id.ms >= now - ttl);
            const r = h.read(op.topic, s, now, limit);
            const asRead = (list: ModelEvent[]): { id: string; frame: string }[] => list.map((e) => ({ id: formatEventId(e.id), frame: e.frame }));
            if (s === undefined) {
              // The newest `limit`; recovered when they are every event appended from now - ttl on.
              const window = evs.filter((e) => e.id.ms >= now - ttl);
              assert.deepEqual(r.events, asRead(limit === undefined ? kept : kept.slice(-limit)), `newest ${limit} of ${op.topic} at +${now - T0}`);
              assert.equal(r.recovered, window.length === kept.length && (limit === undefined || kept.length <= limit),
                `recovered of ${op.topic} without since, limit ${limit}, at +${now - T0}: ${window.length} in the window, ${kept.length} kept`);
            } else {
              const expected = kept.filter((e) => compareEventIds(e.id, s) > 0);
              const noneMissing = evs.filter((e) => compareEventIds(e.id, s) > 0).length === expected.length;
              const created = createdAt.get(op.topic) ?? now;
              assert.deepEqual(r.events, asRead(limit === undefined ? expected : expected.slice(0, limit)),
                `events of ${op.topic} since ${formatEventId(s)}, limit ${limit}, at ${now - T0}`);
              // A limit pages: it does not change recovered.
              assert.equal(r.recovered, noneMissing && s.ms >= created - ttl - tombstone,
                `recovered of ${op.topic} since ${formatEventId(s)} at +${now - T0} (created +${created - T0}, noneMissing ${noneMissing})`);
            }
          } else {
            h.sweep(now, op.budget);
          }
          // Forgetting is observable through lastId; a topic may be forgotten only by a sweep,
          // and only once its newest id is past the ttl.
          for (const topic of TOPICS) {
            const last = appended.get(topic)!.at(-1);
            const known = h.lastId(topic);
            if (createdAt.get(topic) === undefined) {
              assert.equal(known, undefined);
            } else if (known === undefined) {
              assert.equal(op.kind, 'sweep', `${topic} forgotten by a ${op.kind}`);
              assert.ok(last!.id.ms < now - ttl - tombstone, `${topic} forgotten at +${now - T0} while its newest id ${formatEventId(last!.id)} is in its tombstone`);
              createdAt.set(topic, undefined);
            } else {
              assert.equal(known, formatEventId(last!.id));
            }
          }
          assert.equal(h.topicCount, TOPICS.filter((t) => createdAt.get(t) !== undefined).length);
        }
      },
    ));
  });

  test('property: a sweep with a budget for every topic forgets exactly the topics whose newest id is past the ttl', () => {
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 3 }), fc.integer({ min: 1, max: 60 }),
      fc.array(fc.record({ topic: fc.constantFrom(...TOPICS), dt: dtArb }), { maxLength: 30 }), fc.oneof(fc.integer({ min: 0, max: 200 }), ttlPlus),
      (maxEvents, ttl, appends, later) => {
        const h = new MemoryHistory(maxEvents, ttl, 0);
        const newest = new Map<string, number>();
        let now = T0;
        for (const { topic, dt } of appends) {
          now += resolve(dt, ttl);
          appendAt(h, topic, now);
          newest.set(topic, now);
        }
        now += resolve(later, ttl);
        h.sweep(now, TOPICS.length + 1);
        for (const [topic, ms] of newest) assert.equal(h.lastId(topic) === undefined, ms < now - ttl, topic);
      },
    ));
  });
});

// The gateway hands the history Date.now(), which can step backwards (NTP). Whatever the clock does, a
// client must never be told recovered=true while an event after its since is missing, and ids must
// keep increasing within a topic: the history's own guarantees do not mention a monotonic clock.
describe('MemoryHistory: a clock that steps backwards', () => {
  test('recovered stays false for a since before a forgotten event when the clock steps back after the sweep', () => {
    const h = new MemoryHistory(10, 1000);
    const seenByClient = appendAt(h, 't', T0 + 999);
    const missed = appendAt(h, 't', T0 + 1000);
    h.sweep(T0 + 2001, 10); // newest id is past the ttl: the topic is forgotten
    const r = h.read('t', idOf(seenByClient), T0 + 1999); // the clock stepped back 2 ms
    assert.ok(!(r.recovered && !ids(r).includes(missed)),
      `recovered=true, but ${missed} (after since ${seenByClient}) is not replayed`);
  });

  test('ids keep increasing within a topic when the clock steps back after a sweep forgot the topic', () => {
    const h = new MemoryHistory(10, 1000);
    const first = appendAt(h, 't', T0 + 1000);
    h.sweep(T0 + 2001, 10);
    const second = appendAt(h, 't', T0 + 900);
    assert.ok(compareEventIds(idOf(second), idOf(first)) > 0, `${second} handed out after ${first}`);
  });

  test('property: under any clock, recovered=true means every event after since is replayed, and ids increase', () => {
    const anyDt: fc.Arbitrary<Dt> = fc.oneof(dtArb, fc.integer({ min: -150, max: 0 }), fc.integer({ min: -3, max: 0 }));
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 4 }), fc.integer({ min: 1, max: 30 }), fc.array(opArb(anyDt), { maxLength: 60 }),
      (maxEvents, ttl, ops) => {
        const h = new MemoryHistory(maxEvents, ttl);
        const appended = new Map<string, string[]>(TOPICS.map((t) => [t, []]));
        const seen: EventId[] = [];
        let now = T0;
        /** The history's own clock: the latest time it was handed. */
        let highest = 0;
        for (const op of ops) {
          now += resolve(op.dt, ttl);
          highest = Math.max(highest, now);
          if (op.kind === 'append') {
            const id = appendAt(h, op.topic, now);
            const evs = appended.get(op.topic)!;
            const prev = evs.at(-1);
            if (prev !== undefined) assert.ok(compareEventIds(idOf(id), idOf(prev)) > 0, `${id} after ${prev}`);
            evs.push(id);
            seen.push(idOf(id));
          } else if (op.kind === 'read') {
            const s = sinceFrom(op.since, appended.get(op.topic)!.map(idOf), seen, now, ttl);
            const limit = op.limit ?? undefined;
            const r = h.read(op.topic, s, now, limit);
            // Without since: what the read vouches for, every event from (its clock - ttl) on.
            const after = appended.get(op.topic)!.filter((id) => (s === undefined ? idOf(id).ms >= highest - ttl : compareEventIds(idOf(id), s) > 0));
            const got = ids(r);
            for (const id of got) assert.ok(after.includes(id), `replayed ${id}, never appended after since`);
            assert.deepEqual(got, [...got].sort((x, y) => compareEventIds(idOf(x), idOf(y))), 'oldest first');
            if (limit !== undefined) assert.ok(got.length <= limit, `${got.length} events for a limit of ${limit}`);
            if (r.recovered) {
              const want = s === undefined || limit === undefined ? after : after.slice(0, limit);
              assert.deepEqual(got, want, `recovered=true since ${s === undefined ? 'none' : formatEventId(s)} at ${now - T0}, yet events are missing`);
            }
          } else {
            h.sweep(now, op.budget);
          }
        }
      },
    ), { numRuns: 1000 });
  });
});

describe('MemoryHistory: a new life', () => {
  test('a history started at T vouches for nothing before T: a since from a previous life is not recovered', () => {
    const started = T0 + 50_000;
    const h = new MemoryHistory(10, 60_000, undefined, started);
    assert.deepEqual(h.read('t', { ms: T0 + 40_000, seq: 3 }, started + 10), { events: [], recovered: false });
    const e = appendAt(h, 't', started + 20);
    const r = h.read('t', { ms: T0 + 40_000, seq: 3 }, started + 30);
    assert.deepEqual(ids(r), [e]);
    assert.equal(r.recovered, false);
    assert.equal(h.read('t', idOf(e), started + 30).recovered, true);
    assert.equal(h.read('u', { ms: started, seq: 0 }, started + 30).recovered, true);
  });
});

describe('MemoryHistory: frames kept as bytes', () => {
  // Frames of every size and kind of character: the ring wraps, grows,
  // shrinks on sweep and must give back each frame exactly as appended.
  const frameArb = fc.oneof(
    fc.string({ maxLength: 40 }),
    fc.string({ unit: 'grapheme', maxLength: 30 }),
    fc.string({ unit: fc.constantFrom('é', '€', '😀', 'a', '"', '\u0000'), maxLength: 300 }),
    fc.constant(''),
    fc.integer({ min: 200, max: 3000 }).map((n) => 'x'.repeat(n)),
    // Three bytes per UTF-16 unit: the most a frame can take, so its room is exactly its need.
    fc.integer({ min: 1, max: 120 }).map((n) => '€'.repeat(n)),
  );
  const stepArb = fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('append' as const), topic: fc.constantFrom('a', 'b'), frame: frameArb, dt: fc.integer({ min: 0, max: 30 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('sweep' as const), dt: fc.integer({ min: 0, max: 120 }) }) },
  );

  test('property: every stored frame reads back as appended, whatever their sizes, across wraps, growth, trims and sweeps', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 12 }), fc.array(stepArb, { maxLength: 120 }), (max, steps) => {
      const ttl = 100;
      const h = new MemoryHistory(max, ttl);
      const model = new Map<string, { id: string; ms: number; frame: string }[]>();
      let now = T0;
      for (const step of steps) {
        now += step.dt;
        if (step.kind === 'sweep') {
          h.sweep(now, 10);
        } else {
          const id = h.append(step.topic, now, (f: string) => f, step.frame).id;
          const list = model.get(step.topic) ?? [];
          list.push({ id, ms: now, frame: step.frame });
          model.set(step.topic, list);
        }
        for (const [topic, list] of model) {
          const want = list.filter((e) => e.ms >= now - ttl).slice(-max);
          const got = h.read(topic, since('0-0'), now).events;
          assert.deepEqual(got, want.map((e) => ({ id: e.id, frame: e.frame })));
        }
      }
    }), { numRuns: 500 });
  });

  test('frames that fill their room exactly (three bytes a unit), many lengths, many counts: each reads back intact', () => {
    // Walks the ring through thousands of layouts, so that a frame lands in
    // a free stretch exactly its size, or one byte short, at some point.
    for (const max of [2, 3, 5, 8]) {
      const h = new MemoryHistory(max, 60_000);
      const kept: { id: string; frame: string }[] = [];
      let x = 7;
      for (let i = 0; i < 3000; i++) {
        x = (x * 1103515245 + 12345) % 2147483648;
        const frame = '€'.repeat(1 + (x % 97));
        kept.push({ id: h.append('t', T0, (f: string) => f, frame).id, frame });
        if (kept.length > max) kept.shift();
        assert.deepEqual(h.read('t', since('0-0'), T0).events, kept, `max ${max}, append ${i}`);
      }
    }
  });

  // White box: a log driven by pushes, drops (as the age trim does) and
  // compactions (as the sweep does), each frame sized from the log's layout
  // after the drop a full log makes first (the room at the end, before the
  // head, between tail and head) at one unit under, at and over it, in
  // characters of 1, 3 and 4 bytes, or empty. After every step: no two
  // frames overlap, none leaves the buffer, each reads back, `held` is
  // their bytes, and the wrap rule (tail > h unless wrapped) holds.
  const checkLayout = (log: TopicLog, kept: readonly string[]): void => {
    const spans: [number, number][] = [];
    let held = 0;
    for (let i = 0; i < log.size; i++) {
      const at = log.slot(i);
      assert.equal(log.frame(at), kept[i], `frame ${i} of ${log.size}`);
      const from = log.off[at]!;
      const to = from + Math.max(1, log.len[at]!);
      assert.ok(from >= 0 && to <= log.bytes!.length, `frame ${i} at ${from}..${to} outside ${log.bytes!.length}`);
      for (const [x, y] of spans) assert.ok(to <= x || from >= y, `frame ${i} at ${from}..${to} overlaps ${x}..${y}`);
      spans.push([from, to]);
      held += to - from;
    }
    assert.equal(log.held, held);
    if (log.size > 0) {
      const h = log.off[log.head]!;
      const wrapped = spans.some(([x]) => x < h);
      assert.ok(wrapped ? log.tail <= h : log.tail > h, `tail ${log.tail}, head at ${h}, wrapped ${wrapped}`);
    }
  };
  const layoutStep = fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('push' as const), which: fc.constantFrom('end', 'start', 'gap', 'any'), delta: fc.integer({ min: -1, max: 1 }),
      any: fc.integer({ min: 0, max: 300 }), unit: fc.constantFrom('x', '€', '😀', '') }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'drop' as const }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'compact' as const }) },
  );

  test('property: frames sized to the free stretch, one unit under, at and over it, never overlap a stored one', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 12 }), fc.array(layoutStep, { minLength: 1, maxLength: 200 }), (max, steps) => {
      const log = new TopicLog({ ms: 0, seq: 0 });
      const kept: string[] = [];
      for (const st of steps) {
        if (st.kind === 'drop') {
          if (log.size > 0) { log.dropOldest(); kept.shift(); }
        } else if (st.kind === 'compact') {
          log.compact();
        } else {
          // Where a full log's push will stand after dropping its oldest.
          const size = log.size === max ? log.size - 1 : log.size;
          const head = log.size === max ? log.slot(1) : log.head;
          const cap = log.bytes?.length ?? 0;
          const tail = size === 0 ? 0 : log.tail;
          const h = size === 0 ? 0 : log.off[head]!;
          const free = st.which === 'end' ? cap - tail : st.which === 'start' ? h : st.which === 'gap' ? h - tail : st.any;
          const per = st.unit === '' ? 1 : Buffer.byteLength(st.unit);
          const frame = st.unit.repeat(Math.min(2000, Math.max(0, Math.floor(free / per) + st.delta)));
          log.push(0, 0, frame, max);
          kept.push(frame);
          if (kept.length > max) kept.shift();
        }
        checkLayout(log, kept);
      }
    }), { numRuns: 1000 });
  });

  test('a log filled to tail = head by empty frames writes the next frame elsewhere (the full ring)', () => {
    // Found by review: a wrapped ring whose gap empty frames closed exactly.
    const log = new TopicLog({ ms: 0, seq: 0 });
    const kept: string[] = [];
    const push = (f: string): void => { log.push(0, 0, f, 8); kept.push(f); };
    for (let i = 0; i < 4; i++) push(String(i).repeat(10));
    push('€'.repeat(71));
    for (let i = 0; i < 3; i++) { log.dropOldest(); kept.shift(); }
    push('€'.repeat(9));
    push(''); push(''); push('');
    push('');
    push('x');
    checkLayout(log, kept.slice(-8));
  });

  test('a buffer grown for large frames shrinks back when they are gone, and an emptied log lets go of it', () => {
    const log = new TopicLog({ ms: 0, seq: 0 });
    for (let i = 0; i < 8; i++) log.push(0, i, 'x'.repeat(10_000), 100);
    const big = log.bytes!.length;
    assert.ok(big >= 80_000 && big <= 4 * 80_000, `${big} bytes for 80,000`);
    for (let i = 0; i < 100; i++) log.push(1, i, 'small', 100);
    assert.equal(log.size, 100);
    while (log.bytes!.length > 8 * log.held && log.bytes!.length > 256) {
      const before = log.bytes!.length;
      log.compact();
      assert.ok(log.bytes!.length < before, 'each compaction halves');
    }
    assert.ok(log.bytes!.length <= 8 * 500, `${log.bytes!.length} bytes kept for 100 frames of 5`);
    for (let i = 0; i < 100; i++) assert.equal(log.frame(log.slot(i)), 'small');
    const settled = log.bytes!.length;
    for (let i = 0; i < 1000; i++) { log.push(2, i, 'small', 100); log.compact(); }
    assert.equal(log.bytes!.length, settled, 'pushes and compactions do not take turns growing and halving it');
    while (log.size > 0) log.dropOldest();
    log.compact();
    assert.equal(log.bytes, undefined);
  });

  test('a large ASCII frame takes its own bytes, not three times them', () => {
    const log = new TopicLog({ ms: 0, seq: 0 });
    log.push(0, 0, 'x'.repeat(1 << 20), 1);
    assert.ok(log.bytes!.length <= 2 * (1 << 20) + 2, `${log.bytes!.length} bytes for 1 MiB`);
    log.push(0, 1, 'y'.repeat(1 << 20), 1);
    assert.ok(log.bytes!.length <= 2 * (1 << 20) + 2, `${log.bytes!.length} bytes for 1 MiB, the second`);
    assert.equal(log.frame(log.slot(0)), 'y'.repeat(1 << 20));
  });

  test('a frame read back is a copy: a later append over its old bytes does not change it', () => {
    const h = new MemoryHistory(2, 60_000);
    h.append('t', T0, (f: string) => f, 'first é');
    const [first] = h.read('t', since('0-0'), T0).events;
    for (let i = 0; i < 20; i++) h.append('t', T0 + i, (f: string) => f, `again ${i} ${'y'.repeat(i * 50)}`);
    assert.equal(first!.frame, 'first é');
  });
});
