import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { EventClass } from '@sluice/protocol';
import { Coalescer, decideOutbound, effectiveSlowBufferBytes, Mailbox, onDrained } from '../src/backpressure.ts';
import type { CongestionState, MailItem, Offer, Outbound, OutboundLimits } from '../src/backpressure.ts';

interface Item extends MailItem {
  /** Offer order, to tell items apart and check order. */
  readonly seq: number;
}

let nextSeq = 0;
const mk = (cls: EventClass, topic: string, key: string | undefined, frame = `f${nextSeq}`): Item =>
  ({ topic, cls, key, id: cls === EventClass.Durable ? `1-${nextSeq}` : undefined, frame, seq: nextSeq++ });
const durable = (topic = 't', frame?: string): Item => mk(EventClass.Durable, topic, undefined, frame);
const ephemeral = (topic = 't', frame?: string): Item => mk(EventClass.Ephemeral, topic, undefined, frame);
const keyed = (topic: string, key: string, frame?: string): Item => mk(EventClass.Keyed, topic, key, frame);

function drain<T extends MailItem>(m: Mailbox<T>): T[] {
  const out: T[] = [];
  for (let it = m.shift(); it !== undefined; it = m.shift()) out.push(it);
  return out;
}

const LIMITS = { ephemeralDropLen: 100, slowConsumerLen: 1000 };

describe('Mailbox', () => {
  test('an empty mailbox shifts and peeks undefined and holds 0 bytes', () => {
    const m = new Mailbox<Item>(LIMITS);
    assert.equal(m.shift(), undefined);
    assert.equal(m.peek(), undefined);
    assert.equal(m.size, 0);
    assert.equal(m.bytes, 0);
  });

  test('durable items are queued and come out oldest first, each once; peek does not remove', () => {
    const m = new Mailbox<Item>(LIMITS);
    const items = [durable('a', 'xx'), durable('b', 'yyy'), durable('a', 'z')];
    for (const it of items) assert.equal(m.offer(it), 'queued');
    assert.equal(m.size, 3);
    assert.equal(m.bytes, 6);
    assert.equal(m.peek(), items[0]);
    assert.equal(m.peek(), items[0]);
    assert.equal(m.shift(), items[0]);
    assert.equal(m.bytes, 4);
    assert.deepEqual(drain(m), items.slice(1));
    assert.equal(m.bytes, 0);
  });

  test('ephemeral: queued while fewer than ephemeralDropLen items are held, dropped (nothing stored) at the limit', () => {
    const m = new Mailbox<Item>({ ephemeralDropLen: 3, slowConsumerLen: 10 });
    assert.equal(m.offer(durable()), 'queued');
    assert.equal(m.offer(ephemeral()), 'queued');
    assert.equal(m.offer(ephemeral()), 'queued', 'holds 2 < 3: queued, now holds 3');
    const bytes = m.bytes;
    assert.equal(m.offer(ephemeral('t', 'a long frame')), 'dropped', 'holds 3 >= 3');
    assert.equal(m.size, 3);
    assert.equal(m.bytes, bytes);
    assert.equal(m.offer(durable()), 'queued', 'other classes are not subject to the ephemeral limit');
    assert.equal(m.offer(ephemeral()), 'dropped');
    m.shift();
    m.shift();
    assert.equal(m.offer(ephemeral()), 'queued', 'back below the limit');
  });

  test('ephemeralDropLen 0 drops every ephemeral item, even into an empty mailbox', () => {
    const m = new Mailbox<Item>({ ephemeralDropLen: 0, slowConsumerLen: 10 });
    assert.equal(m.offer(ephemeral()), 'dropped');
    assert.equal(m.size, 0);
  });

  test('keyed: the same (topic, key) is replaced in place, keeping the older position and taking the new content', () => {
    const m = new Mailbox<Item>(LIMITS);
    const k1 = keyed('t', 'k', 'old');
    const d = durable('t');
    const k2 = keyed('t', 'k', 'newer!');
    assert.equal(m.offer(k1), 'queued');
    assert.equal(m.offer(d), 'queued');
    assert.equal(m.bytes, 3 + d.frame.length);
    assert.equal(m.offer(k2), 'superseded');
    assert.equal(m.size, 2);
    assert.equal(m.bytes, 6 + d.frame.length);
    assert.equal(m.peek(), k2);
    assert.deepEqual(drain(m), [k2, d]);
  });

  test('keyed: another topic or another key is a different (topic, key)', () => {
    const m = new Mailbox<Item>(LIMITS);
    const items = [keyed('t', 'k'), keyed('u', 'k'), keyed('t', 'j'), keyed('t\u0000k', ''), keyed('t', 'k\u0000'), keyed('tk', '')];
    for (const it of items) assert.equal(m.offer(it), 'queued');
    assert.deepEqual(drain(m), items);
  });

  test('keyed: once the older item has been shifted, the next one is queued at the tail', () => {
    const m = new Mailbox<Item>(LIMITS);
    const k1 = keyed('t', 'k');
    m.offer(k1);
    const d = durable();
    m.offer(d);
    assert.equal(m.shift(), k1);
    const k2 = keyed('t', 'k');
    assert.equal(m.offer(k2), 'queued');
    assert.deepEqual(drain(m), [d, k2]);
  });

  test('a keyed item without a key is queued like a durable one, never superseded', () => {
    const m = new Mailbox<Item>(LIMITS);
    const a = mk(EventClass.Keyed, 't', undefined);
    const b = mk(EventClass.Keyed, 't', undefined);
    assert.equal(m.offer(a), 'queued');
    assert.equal(m.offer(b), 'queued');
    assert.deepEqual(drain(m), [a, b]);
  });

  test('overflow: queued up to slowConsumerLen items; the one past it is held and answered overflow', () => {
    const m = new Mailbox<Item>({ ephemeralDropLen: 100, slowConsumerLen: 3 });
    for (let i = 0; i < 3; i++) assert.equal(m.offer(durable()), 'queued', `item ${i}`);
    const last = keyed('t', 'k');
    assert.equal(m.offer(last), 'overflow');
    assert.equal(m.size, 4, 'the overflowing item is queued');
    assert.equal(m.offer(keyed('t', 'k')), 'superseded', 'superseding never grows the size, so never overflows');
    assert.equal(m.size, 4);
    assert.equal(m.offer(ephemeral()), 'overflow', 'ephemeral items below their own limit can overflow too');
    assert.equal(m.offer(durable()), 'overflow');
  });

  test('an ephemeral item dropped at a full mailbox is dropped, not an overflow', () => {
    const m = new Mailbox<Item>({ ephemeralDropLen: 2, slowConsumerLen: 2 });
    m.offer(durable());
    m.offer(durable());
    assert.equal(m.offer(ephemeral()), 'dropped');
    assert.equal(m.size, 2);
  });

  test('slowConsumerLen 0 overflows on the first queued item', () => {
    const m = new Mailbox<Item>({ ephemeralDropLen: 5, slowConsumerLen: 0 });
    assert.equal(m.offer(durable()), 'overflow');
    assert.equal(m.size, 1);
  });

  test('keyed positions stay valid across a rewind and a compaction', () => {
    const m = new Mailbox<Item>(LIMITS, 2);
    m.offer(durable());
    m.shift(); // empty: rewinds, positions keep growing
    const d = Array.from({ length: 6 }, () => durable());
    for (const x of d.slice(0, 6)) m.offer(x);
    const k1 = keyed('t', 'k');
    m.offer(k1);
    const tail = [durable(), durable()];
    for (const x of tail) m.offer(x);
    // Shifting 5 of 9 leaves a dead prefix longer than the live part: compacted.
    for (let i = 0; i < 5; i++) assert.equal(m.shift(), d[i]);
    const k2 = keyed('t', 'k');
    assert.equal(m.offer(k2), 'superseded');
    assert.equal(m.offer(durable('t', 'x'.repeat(7))), 'queued');
    assert.equal(m.size, 5);
    const rest = drain(m);
    assert.deepEqual(rest.slice(0, 4), [d[5], k2, ...tail]);
    assert.equal(m.bytes, 0);
    const k3 = keyed('t', 'k');
    assert.equal(m.offer(k3), 'queued', 'the shifted keyed item no longer supersedes');
  });

  test('clear forgets every item and every keyed position', () => {
    const m = new Mailbox<Item>(LIMITS);
    m.offer(keyed('t', 'k'));
    m.offer(durable());
    m.clear();
    assert.equal(m.size, 0);
    assert.equal(m.bytes, 0);
    assert.equal(m.shift(), undefined);
    const k = keyed('t', 'k');
    assert.equal(m.offer(k), 'queued', 'the cleared keyed item is not superseded');
    assert.deepEqual(drain(m), [k]);
  });

  // The model: a plain array, searched linearly, with the rules of PROTOCOL.md.
  class ModelMailbox {
    readonly items: Item[] = [];
    constructor(readonly ephemeralDropLen: number, readonly slowConsumerLen: number) {}
    offer(it: Item): Offer {
      if (it.cls === EventClass.Ephemeral && this.items.length >= this.ephemeralDropLen) return 'dropped';
      if (it.cls === EventClass.Keyed && it.key !== undefined) {
        const i = this.items.findIndex((x) => x.cls === EventClass.Keyed && x.topic === it.topic && x.key === it.key);
        if (i >= 0) {
          this.items[i] = it;
          return 'superseded';
        }
      }
      this.items.push(it);
      return this.items.length > this.slowConsumerLen ? 'overflow' : 'queued';
    }
    get bytes(): number {
      return this.items.reduce((n, x) => n + x.frame.length, 0);
    }
  }

  // Bursts of offers and of shifts, so that the mailbox grows, shrinks without
  // emptying (compaction) and empties (rewind), with keyed items across both.
  const offered = fc.record({
    cls: fc.constantFrom(EventClass.Durable, EventClass.Keyed, EventClass.Ephemeral),
    topic: fc.constantFrom('a', 'b'),
    key: fc.option(fc.constantFrom('x', 'y', 'z'), { nil: undefined, freq: 8 }),
    frameLen: fc.integer({ min: 0, max: 20 }),
  });
  const mailOp = fc.oneof(
    fc.record({ op: fc.constant('offer' as const), items: fc.array(offered, { minLength: 1, maxLength: 10 }) }),
    fc.record({ op: fc.constant('shift' as const), n: fc.integer({ min: 1, max: 10 }) }),
  );

  test('property: offer, shift, peek, size and bytes match a plain-array model; keyed newest-only; durable exactly once in order', () => {
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 8 }), fc.integer({ min: 0, max: 12 }), fc.integer({ min: 1, max: 6 }),
      fc.array(mailOp, { maxLength: 40 }),
      (ephemeralDropLen, slowConsumerLen, compactAfter, ops) => {
        const m = new Mailbox<Item>({ ephemeralDropLen, slowConsumerLen }, compactAfter);
        const model = new ModelMailbox(ephemeralDropLen, slowConsumerLen);
        const durableIn: Item[] = [];
        const out: Item[] = [];
        const check = (): void => {
          assert.equal(m.size, model.items.length);
          assert.equal(m.bytes, model.bytes);
          assert.equal(m.peek(), model.items[0]);
        };
        for (const o of ops) {
          if (o.op === 'offer') {
            for (const x of o.items) {
              const it = mk(x.cls, x.topic, x.cls === EventClass.Keyed ? x.key : undefined, 'f'.repeat(x.frameLen));
              if (x.cls === EventClass.Durable) durableIn.push(it);
              const before = model.items.length;
              const want = model.offer(it);
              const got = m.offer(it);
              assert.equal(got, want);
              assert.equal(got === 'overflow', model.items.length > before && model.items.length > slowConsumerLen);
              check();
            }
          } else {
            for (let i = 0; i < o.n; i++) {
              const got = m.shift();
              assert.equal(got, model.items.shift());
              if (got !== undefined) out.push(got);
              check();
            }
          }
        }
        const rest = drain(m);
        assert.deepEqual(rest, model.items);
        out.push(...rest);
        assert.equal(m.bytes, 0);
        // Keyed items of one (topic, key) never come out older after newer.
        const lastSeq = new Map<string, number>();
        for (const it of out) {
          if (it.cls !== EventClass.Keyed || it.key === undefined) continue;
          const k = `${it.topic}\u0000${it.key}`;
          assert.ok((lastSeq.get(k) ?? -1) < it.seq, `keyed ${k} out of order`);
          lastSeq.set(k, it.seq);
        }
        // Every durable item offered came out exactly once, in order.
        assert.deepEqual(out.filter((x) => x.cls === EventClass.Durable), durableIn);
      },
    ), { numRuns: 300 });
  });
});

describe('decideOutbound', () => {
  const L: OutboundLimits = { maxBufferedBytes: 1000, slowBufferBytes: 250, maxCongestedMs: 30_000 };
  const T0 = 1_000_000;
  const fresh = (): CongestionState => ({ congestedSince: -1 });

  test('below the soft limit: send, not congested; at the soft limit: mailbox, congested since now', () => {
    const s = fresh();
    assert.equal(decideOutbound(s, 0, T0, L), 'send');
    assert.equal(decideOutbound(s, 249, T0, L), 'send');
    assert.equal(s.congestedSince, -1);
    assert.equal(decideOutbound(s, 250, T0 + 5, L), 'mailbox');
    assert.equal(s.congestedSince, T0 + 5);
  });

  test('the congestion timer keeps its start while congested, and stops when the buffer falls below the soft limit', () => {
    const s = fresh();
    decideOutbound(s, 300, T0, L);
    assert.equal(decideOutbound(s, 999, T0 + 10, L), 'mailbox');
    assert.equal(s.congestedSince, T0);
    assert.equal(decideOutbound(s, 249, T0 + 20, L), 'send');
    assert.equal(s.congestedSince, -1);
    assert.equal(decideOutbound(s, 250, T0 + 29_999 + 30_000, L), 'mailbox', 'a new congestion starts a new timer');
    assert.equal(s.congestedSince, T0 + 59_999);
  });

  test('at the hard limit: close_buffer_limit; one byte under: mailbox; the state is left alone', () => {
    const s = fresh();
    assert.equal(decideOutbound(s, 1000, T0, L), 'close_buffer_limit');
    assert.equal(s.congestedSince, -1);
    assert.equal(decideOutbound(s, 999, T0, L), 'mailbox');
    assert.equal(decideOutbound(s, 5000, T0 + 1, L), 'close_buffer_limit');
    assert.equal(s.congestedSince, T0);
  });

  test('congested for exactly maxCongestedMs: mailbox; one ms longer: close_congested', () => {
    const s = fresh();
    decideOutbound(s, 250, T0, L);
    assert.equal(decideOutbound(s, 250, T0 + 30_000, L), 'mailbox');
    assert.equal(decideOutbound(s, 250, T0 + 30_001, L), 'close_congested');
    assert.equal(s.congestedSince, T0, 'the close leaves the state alone');
  });

  test('the buffer limit is checked before congestion', () => {
    const s = fresh();
    decideOutbound(s, 250, T0, L);
    assert.equal(decideOutbound(s, 1000, T0 + 60_000, L), 'close_buffer_limit');
  });

  test('congestion is not closed once the buffer fell below the soft limit, however long ago it started', () => {
    const s = fresh();
    decideOutbound(s, 250, T0, L);
    assert.equal(decideOutbound(s, 10, T0 + 60_000, L), 'send');
  });

  test('maxCongestedMs 0 never closes for congestion', () => {
    const s = fresh();
    const never = { ...L, maxCongestedMs: 0 };
    decideOutbound(s, 250, T0, never);
    assert.equal(decideOutbound(s, 999, T0 + 365 * 86_400_000, never), 'mailbox');
  });

  test('onDrained: below the soft limit the socket leaves the slow lane and the timer stops; at it, nothing changes', () => {
    const s = fresh();
    decideOutbound(s, 400, T0, L);
    assert.equal(onDrained(s, 250, T0 + 1, L), false);
    assert.equal(s.congestedSince, T0);
    assert.equal(onDrained(s, 249, T0 + 2, L), true);
    assert.equal(s.congestedSince, -1);
    assert.equal(onDrained(s, 0, T0 + 3, L), true);
    assert.equal(s.congestedSince, -1);
  });

  test('effectiveSlowBufferBytes forces the soft limit to at most floor(max / 2) and says when it did', () => {
    assert.deepEqual(effectiveSlowBufferBytes(262_144, 1_048_576), { value: 262_144, clamped: false });
    assert.deepEqual(effectiveSlowBufferBytes(524_288, 1_048_576), { value: 524_288, clamped: false });
    assert.deepEqual(effectiveSlowBufferBytes(524_289, 1_048_576), { value: 524_288, clamped: true });
    assert.deepEqual(effectiveSlowBufferBytes(2_000_000, 1_048_576), { value: 524_288, clamped: true });
    assert.deepEqual(effectiveSlowBufferBytes(4, 9), { value: 4, clamped: false });
    assert.deepEqual(effectiveSlowBufferBytes(5, 9), { value: 4, clamped: true });
    assert.deepEqual(effectiveSlowBufferBytes(0, 0), { value: 0, clamped: false });
  });

  test('property: over random sequences, decisions match a model of congested runs, up to the first close', () => {
    const step = fc.record({
      drained: fc.boolean(),
      dt: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 3 }) }, fc.integer({ min: 0, max: 40 })),
      // Near the thresholds often, anywhere sometimes; the closes end a sequence, so rarely.
      pick: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom('slow-1' as const, 'slow' as const, 'max-1' as const) },
        { weight: 1, arbitrary: fc.constantFrom('max' as const, 'any' as const) },
      ),
      any: fc.integer({ min: 0, max: 1200 }),
    });
    fc.assert(fc.property(
      fc.integer({ min: 2, max: 1000 }), fc.integer({ min: 0, max: 100 }), fc.oneof(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 0, max: 60 })),
      fc.array(step, { maxLength: 120 }),
      (max, slowPct, maxCongestedMs, steps) => {
        const slow = Math.max(1, Math.floor((max * slowPct) / 100));
        const limits: OutboundLimits = { maxBufferedBytes: max, slowBufferBytes: slow, maxCongestedMs };
        const s = fresh();
        // The model: the time of the first observation of the current run of congested observations.
        let runStart: number | undefined;
        let now = 0;
        for (const st of steps) {
          now += st.dt;
          const b = { 'slow-1': slow - 1, slow, 'max-1': max - 1, max, any: st.any }[st.pick];
          if (st.drained) {
            const left = b < slow;
            assert.equal(onDrained(s, b, now, limits), left);
            if (left) runStart = undefined;
          } else {
            let want: Outbound;
            if (b >= max) want = 'close_buffer_limit';
            else if (b >= slow) {
              runStart ??= now;
              want = maxCongestedMs > 0 && now - runStart > maxCongestedMs ? 'close_congested' : 'mailbox';
            } else {
              runStart = undefined;
              want = 'send';
            }
            assert.equal(decideOutbound(s, b, now, limits), want);
            if (want === 'close_buffer_limit' || want === 'close_congested') return; // the socket is closed
          }
          assert.equal(s.congestedSince, runStart ?? -1);
        }
      },
    ), { numRuns: 300 });
  });
});

describe('Coalescer', () => {
  const T0 = 1_000_000;

  test('the interval must be a finite number above 0', () => {
    for (const bad of [0, -1, Number.NaN, Infinity]) assert.throws(() => new Coalescer<string>(bad), RangeError);
    assert.equal(new Coalescer<string>(1).intervalMs, 1);
  });

  test('the first item of a (topic, key) is sent; the next is held until the interval passed, and sent at exactly the interval', () => {
    const c = new Coalescer<string>(100);
    assert.equal(c.offer('t', 'k', 'a', T0), true);
    assert.equal(c.offer('t', 'k', 'b', T0 + 99), false);
    assert.equal(c.size, 1);
    const c2 = new Coalescer<string>(100);
    c2.offer('t', 'k', 'a', T0);
    assert.equal(c2.offer('t', 'k', 'b', T0 + 100), true);
    assert.equal(c2.size, 0);
  });

  test('other topics and keys are independent', () => {
    const c = new Coalescer<string>(100);
    assert.equal(c.offer('t', 'k', 'a', T0), true);
    assert.equal(c.offer('t', 'j', 'b', T0), true);
    assert.equal(c.offer('u', 'k', 'c', T0), true);
    assert.equal(c.offer('t\u0000k', '', 'd', T0), true);
    assert.equal(c.offer('t', 'k\u0000', 'e', T0), true);
  });

  test('newest wins: a held item is replaced, and due releases only the newest', () => {
    const c = new Coalescer<string>(100);
    c.offer('t', 'k', 'a', T0);
    c.offer('t', 'k', 'b', T0 + 10);
    c.offer('t', 'k', 'c', T0 + 20);
    assert.equal(c.size, 1);
    const out: string[] = [];
    c.due(T0 + 100, out);
    assert.deepEqual(out, ['c']);
    assert.equal(c.size, 0);
  });

  test('due releases at release + interval, not a ms before, records the release at now, and appends to out', () => {
    const c = new Coalescer<string>(100);
    c.offer('t', 'k', 'a', T0);
    c.offer('t', 'k', 'b', T0 + 50);
    const out = ['already there'];
    c.due(T0 + 99, out);
    assert.deepEqual(out, ['already there']);
    c.due(T0 + 130, out);
    assert.deepEqual(out, ['already there', 'b']);
    assert.equal(c.offer('t', 'k', 'c', T0 + 229), false, 'the release at T0+130 counts');
    c.due(T0 + 229, out);
    assert.equal(out.length, 2);
    c.due(T0 + 230, out);
    assert.deepEqual(out, ['already there', 'b', 'c']);
  });

  test('due releases in the order (topic, key)s were first held, not by due time nor by last replacement', () => {
    const c = new Coalescer<string>(100);
    c.offer('t', 'late', 'l0', T0 + 50);
    c.offer('t', 'early', 'e0', T0);
    c.offer('t', 'late', 'l1', T0 + 60); // held first, due T0+150
    c.offer('t', 'early', 'e1', T0 + 70); // held second, due T0+100
    c.offer('t', 'late', 'l2', T0 + 80); // replacing keeps its place
    const out: string[] = [];
    c.due(T0 + 120, out);
    assert.deepEqual(out, ['e1'], 'only what is due');
    c.offer('t', 'early', 'e2', T0 + 130); // held again: now after 'late'
    c.due(T0 + 300, out);
    assert.deepEqual(out, ['e1', 'l2', 'e2']);
  });

  test('nextDueAt: undefined when nothing is held, else the earliest due time', () => {
    const c = new Coalescer<string>(100);
    assert.equal(c.nextDueAt(), undefined);
    c.offer('t', 'a', 'a0', T0);
    c.offer('t', 'b', 'b0', T0 + 50);
    assert.equal(c.nextDueAt(), undefined, 'sent items are not held');
    c.offer('t', 'b', 'b1', T0 + 60);
    assert.equal(c.nextDueAt(), T0 + 150);
    c.offer('t', 'a', 'a1', T0 + 70);
    assert.equal(c.nextDueAt(), T0 + 100);
    const out: string[] = [];
    c.due(T0 + 100, out);
    assert.deepEqual(out, ['a1']);
    assert.equal(c.nextDueAt(), T0 + 150);
    c.due(T0 + 150, out);
    assert.equal(c.nextDueAt(), undefined);
  });

  test('an offer after the interval, with an older item still held (due not called yet), is sent and the held item is dropped', () => {
    const c = new Coalescer<string>(100);
    c.offer('t', 'a', 'a0', T0);
    c.offer('t', 'a', 'a1', T0 + 10); // held, due T0+100
    c.offer('t', 'b', 'b0', T0 + 50);
    c.offer('t', 'b', 'b1', T0 + 60); // held, due T0+150
    assert.equal(c.offer('t', 'a', 'a2', T0 + 120), true);
    assert.equal(c.size, 1);
    assert.equal(c.nextDueAt(), T0 + 150);
    const out: string[] = [];
    c.due(T0 + 1000, out);
    assert.deepEqual(out, ['b1'], 'a1 is never released after a2');
  });

  test('forget drops release records older than the cutoff, keeps newer ones and those of held items', () => {
    const c = new Coalescer<string>(100);
    c.offer('t', 'old', 'o0', T0);
    c.offer('t', 'kept', 'k0', T0 + 10);
    c.offer('t', 'held', 'h0', T0);
    c.offer('t', 'held', 'h1', T0 + 5);
    c.forget(T0 + 10);
    assert.equal(c.offer('t', 'old', 'o1', T0 + 20), true, 'forgotten: sent');
    assert.equal(c.offer('t', 'kept', 'k1', T0 + 20), false, 'a record at the cutoff is kept');
    assert.equal(c.nextDueAt(), T0 + 100, 'the held item keeps its due time');
    assert.equal(c.offer('t', 'held', 'h2', T0 + 20), false, 'still within the interval of its release at T0');
    const out: string[] = [];
    c.due(T0 + 99, out);
    assert.deepEqual(out, []);
    c.due(T0 + 110, out);
    assert.deepEqual(out, ['h2', 'k1']);
    c.forget(T0 + 1000);
    assert.equal(c.offer('t', 'held', 'h3', T0 + 150), true, 'forgotten once nothing is held');
  });

  // The model: a list of held (topic, key)s in first-held order and a record of release times.
  class ModelCoalescer {
    readonly held: { k: string; item: number }[] = [];
    readonly released: Record<string, number> = {};
    constructor(readonly interval: number) {}
    offer(k: string, item: number, now: number): boolean {
      const i = this.held.findIndex((h) => h.k === k);
      const last = this.released[k];
      if (last === undefined || now - last >= this.interval) {
        if (i >= 0) this.held.splice(i, 1);
        this.released[k] = now;
        return true;
      }
      if (i >= 0) this.held[i] = { k, item };
      else this.held.push({ k, item });
      return false;
    }
    due(now: number): number[] {
      const out = this.held.filter((h) => (this.released[h.k] as number) + this.interval <= now);
      for (const h of out) this.released[h.k] = now;
      this.held.splice(0, this.held.length, ...this.held.filter((h) => !out.includes(h)));
      return out.map((h) => h.item);
    }
    nextDueAt(): number | undefined {
      if (this.held.length === 0) return undefined;
      return Math.min(...this.held.map((h) => (this.released[h.k] as number) + this.interval));
    }
  }

  test('property: at most one release per interval per (topic, key), never older after newer, the newest always released; matches a model', () => {
    const op = fc.record({
      kind: fc.constantFrom('offer', 'offer', 'offer', 'due', 'forget'),
      topic: fc.constantFrom('a', 'b'),
      key: fc.constantFrom('x', 'y', 'z'),
      dt: fc.integer({ min: 0, max: 25 }),
    });
    fc.assert(fc.property(fc.integer({ min: 1, max: 30 }), fc.array(op, { maxLength: 150 }), (interval, ops) => {
      const c = new Coalescer<number>(interval);
      const model = new ModelCoalescer(interval);
      const releases = new Map<string, { seq: number; at: number }[]>();
      const lastOffered = new Map<string, number>();
      const keyOf = new Map<number, string>();
      const release = (seq: number, at: number): void => {
        const k = keyOf.get(seq) as string;
        const rs = releases.get(k) ?? [];
        const prev = rs.at(-1);
        if (prev !== undefined) {
          assert.ok(at - prev.at >= interval, `${k} released at ${prev.at} and again at ${at}`);
          assert.ok(seq > prev.seq, `${k}: item ${seq} released after the newer ${prev.seq}`);
        }
        rs.push({ seq, at });
        releases.set(k, rs);
      };
      let now = 0;
      let seq = 0;
      const out: number[] = [];
      for (const o of ops) {
        now += o.dt;
        if (o.kind === 'offer') {
          const k = `${o.topic}\u0000${o.key}`;
          const item = seq++;
          keyOf.set(item, k);
          lastOffered.set(k, item);
          const sent = c.offer(o.topic, o.key, item, now);
          assert.equal(sent, model.offer(k, item, now));
          if (sent) release(item, now);
        } else if (o.kind === 'due') {
          out.length = 0;
          c.due(now, out);
          assert.deepEqual(out, model.due(now));
          for (const item of out) release(item, now);
        } else {
          c.forget(now - interval); // changes no answer, so the model ignores it
        }
        assert.equal(c.size, model.held.length);
        assert.equal(c.nextDueAt(), model.nextDueAt());
      }
      // Once time passes, due releases the newest item of every (topic, key) still held.
      now += interval;
      out.length = 0;
      c.due(now, out);
      assert.deepEqual(out, model.due(now));
      for (const item of out) release(item, now);
      assert.equal(c.size, 0);
      assert.equal(c.nextDueAt(), undefined);
      for (const [k, item] of lastOffered) assert.equal(releases.get(k)?.at(-1)?.seq, item, `the newest item of ${k} was released`);
    }), { numRuns: 300 });
  });
});
