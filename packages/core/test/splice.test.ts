import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compareEventIdStrings } from '@sluice/protocol';
import { ReplaySplice, SpliceDrop, SpliceEmit, SpliceHeld, SplicePast } from '../src/splice.ts';

interface Ev { readonly id: string | undefined; readonly tag: string }
const idAt = (i: number): string => `${1000 + Math.floor(i / 3)}-${i % 3}`;
const durable = (i: number): Ev => ({ id: idAt(i), tag: idAt(i) });
const volatile = (n: number): Ev => ({ id: undefined, tag: `v${n}` });

describe('ReplaySplice: examples', () => {
  test('holds live events while the read is out, replays, then releases only what the read did not cover', () => {
    const s = new ReplaySplice<Ev>(idAt(0));
    s.hold();
    const out: string[] = [];
    const emit = (e: Ev): void => void out.push(e.tag);
    assert.equal(s.live(durable(2)), SpliceHeld);
    assert.equal(s.live(volatile(1)), SpliceHeld);
    assert.equal(s.live(durable(3)), SpliceHeld);
    s.replay([durable(1), durable(2)], emit);
    out.push('reply');
    assert.equal(s.release(emit), true, 'live reached the read end (held 3 > 2)');
    assert.deepEqual(out, [idAt(1), idAt(2), 'reply', 'v1', idAt(3)]);
    assert.equal(s.lastId, idAt(3));
    assert.equal(s.live(durable(3)), SpliceDrop | SplicePast);
    assert.equal(s.live(durable(4)), SpliceEmit | SplicePast);
  });

  test('after the replay, live events the read had are dropped until live reaches the read end', () => {
    const s = new ReplaySplice<Ev>(idAt(0));
    s.hold();
    s.replay([durable(1), durable(2), durable(3)], () => {});
    assert.equal(s.release(() => {}), false);
    assert.equal(s.past, false);
    assert.equal(s.live(volatile(1)), SpliceEmit);
    assert.equal(s.live(durable(2)), SpliceDrop);
    assert.equal(s.live(durable(3)), SpliceDrop | SplicePast);
    assert.equal(s.past, true);
    assert.equal(s.live(volatile(2)), SpliceEmit | SplicePast);
  });

  test('the caller\'s own last live id counts as live delivery', () => {
    const s = new ReplaySplice<Ev>(idAt(0));
    s.hold();
    s.replay([durable(1), durable(2)], () => {});
    assert.equal(s.release(() => {}, idAt(2)), true);
  });

  test('a failed read: release alone hands on the held events above since', () => {
    const s = new ReplaySplice<Ev>(idAt(3));
    s.hold();
    s.live(durable(2));
    s.live(durable(5));
    const out: string[] = [];
    s.release((e) => out.push(e.tag));
    assert.deepEqual(out, [idAt(5)]);
  });

  test('a malformed since is refused', () => {
    assert.throws(() => new ReplaySplice<Ev>('x'), /malformed/);
  });
});

/**
 * The model: a topic's durable events 0..n-1 (ids in order). The consumer
 * has up to `k` (since). The history read returns (k, r]. Live delivery
 * covers every event from `l` on (l <= r + 1: subscribed before the read,
 * so no gap), in order, with non-durable events between them. The read's
 * answer arrives after `p` live events. Expected: every durable event above
 * since exactly once, in id order, and every non-durable one.
 */
const scenario = fc.integer({ min: 0, max: 30 }).chain((n) => fc.integer({ min: -1, max: Math.max(-1, n - 1) }).chain((k) =>
  fc.integer({ min: k, max: Math.max(k, n - 1) }).chain((r) => fc.record({
    n: fc.constant(n), k: fc.constant(k), r: fc.constant(r),
    l: fc.integer({ min: 0, max: r + 1 }),
    volatiles: fc.array(fc.integer({ min: 0, max: 40 }), { maxLength: 8 }),
    p: fc.integer({ min: 0, max: 60 }),
    bypass: fc.boolean(),
    seen: fc.boolean(),
  }))));

function liveStream(n: number, l: number, volatiles: readonly number[]): Ev[] {
  const live: Ev[] = [];
  for (let i = l; i < n; i++) live.push(durable(i));
  volatiles.forEach((at, j) => live.splice(Math.min(at, live.length), 0, volatile(j)));
  return live;
}

describe('ReplaySplice: properties', () => {
  test('any interleaving of a sorted read and a live stream: durable events once, in order; non-durable ones all kept', () => {
    fc.assert(fc.property(scenario, ({ n, k, r, l, volatiles, p, bypass, seen }) => {
      const since = k < 0 ? '999-0' : idAt(k);
      const read: Ev[] = [];
      for (let i = k + 1; i <= r; i++) read.push(durable(i));
      const live = liveStream(n, l, volatiles);
      const at = Math.min(p, live.length);
      const out: Ev[] = [];
      const emit = (e: Ev): void => void out.push(e);
      const s = new ReplaySplice<Ev>(since);
      s.hold();
      // The shard's mode (bypass): once past, it stops feeding the splice and emits straight.
      let native = false;
      // `seen`: the caller's newest live id before the read is in (what was delivered live ahead of the hold).
      let lastLive: string | undefined;
      const feed = (e: Ev): void => {
        if (e.id !== undefined) lastLive = e.id;
        if (native) {
          out.push(e);
          return;
        }
        const res = s.live(e);
        if ((res & SpliceEmit) !== 0) out.push(e);
        if (bypass && (res & SplicePast) !== 0) native = true;
      };
      for (let i = 0; i < at; i++) feed(live[i]!);
      s.replay(read, emit);
      if (s.release(emit, seen ? lastLive : undefined) && bypass) native = true;
      for (let i = at; i < live.length; i++) feed(live[i]!);

      const got = out.filter((e) => e.id !== undefined).map((e) => e.id!);
      const want: string[] = [];
      for (let i = k + 1; i < Math.max(r + 1, n); i++) want.push(idAt(i));
      assert.deepEqual(got, want);
      for (let i = 1; i < got.length; i++) assert.ok(compareEventIdStrings(got[i - 1]!, got[i]!)! < 0);
      assert.deepEqual(out.filter((e) => e.id === undefined).map((e) => e.tag), live.filter((e) => e.id === undefined).map((e) => e.tag));
      if (want.length > 0 && !native) assert.equal(s.lastId, want.at(-1));
    }), { numRuns: 2000 });
  });

  test('catch-up after catch-up (RedisBroker): each round delivers what the round missed, nothing twice', () => {
    fc.assert(fc.property(fc.array(fc.record({ gap: fc.integer({ min: 0, max: 5 }), overlap: fc.integer({ min: 0, max: 3 }),
      after: fc.integer({ min: 0, max: 5 }), p: fc.integer({ min: 0, max: 8 }) }), { minLength: 1, maxLength: 6 }), (rounds) => {
      const out: string[] = [];
      const emit = (e: Ev): void => void out.push(e.id!);
      const s = new ReplaySplice<Ev>('999-0');
      let next = 0;
      for (const round of rounds) {
        // An outage: `gap` events stored while nothing was delivered live.
        const from = next;
        next += round.gap;
        s.hold();
        // Live comes back `overlap` events before the read's end, then `after` more.
        const read: Ev[] = [];
        for (let i = from; i < next; i++) read.push(durable(i));
        const live: Ev[] = [];
        for (let i = Math.max(from, next - round.overlap); i < next + round.after; i++) live.push(durable(i));
        const at = Math.min(round.p, live.length);
        for (let i = 0; i < at; i++) if ((s.live(live[i]!) & SpliceEmit) !== 0) out.push(live[i]!.id!);
        s.replay(read, emit);
        s.release(emit);
        for (let i = at; i < live.length; i++) if ((s.live(live[i]!) & SpliceEmit) !== 0) out.push(live[i]!.id!);
        next += round.after;
      }
      assert.deepEqual(out, Array.from({ length: next }, (_, i) => idAt(i)));
      if (next > 0) assert.equal(s.lastId, idAt(next - 1));
    }));
  });
});
