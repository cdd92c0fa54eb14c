import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { EVENT_ID_PATTERN, parseEventId } from '../src/index.ts';
import { compareEventIds, compareEventIdStrings, eventIdMs, formatEventId, nextEventId } from '../src/event-id.ts';
import type { EventId } from '../src/event-id.ts';

const T0 = 1_732_900_000_000;
const eventId = fc.record({ ms: fc.integer({ min: 0, max: 999_999_999_999_999 }), seq: fc.integer({ min: 0, max: 1_000_000 }) });

describe('formatEventId', () => {
  test('writes <ms>-<seq>, as Redis streams do', () => {
    assert.equal(formatEventId({ ms: 1732900000123, seq: 0 }), '1732900000123-0');
    assert.equal(formatEventId({ ms: 0, seq: 17 }), '0-17');
  });

  test('property: what it writes is a protocol event id that parses back', () => {
    fc.assert(fc.property(eventId, (id) => {
      const s = formatEventId(id);
      assert.match(s, EVENT_ID_PATTERN);
      assert.deepEqual(parseEventId(s), { ms: id.ms, seq: id.seq });
    }));
  });
});

describe('compareEventIds', () => {
  test('orders by ms, then by seq', () => {
    assert.ok(compareEventIds({ ms: 1, seq: 9 }, { ms: 2, seq: 0 }) < 0);
    assert.ok(compareEventIds({ ms: 2, seq: 0 }, { ms: 1, seq: 9 }) > 0);
    assert.ok(compareEventIds({ ms: 2, seq: 1 }, { ms: 2, seq: 2 }) < 0);
    assert.equal(compareEventIds({ ms: 2, seq: 2 }, { ms: 2, seq: 2 }), 0);
  });

  test('property: a total order that agrees with lexicographic (ms, seq)', () => {
    fc.assert(fc.property(eventId, eventId, eventId, (a, b, c) => {
      const model = a.ms !== b.ms ? Math.sign(a.ms - b.ms) : Math.sign(a.seq - b.seq);
      assert.equal(Math.sign(compareEventIds(a, b)), model);
      assert.equal(Math.sign(compareEventIds(b, a)), -model);
      assert.equal(compareEventIds(a, a), 0);
      if (compareEventIds(a, b) <= 0 && compareEventIds(b, c) <= 0) assert.ok(compareEventIds(a, c) <= 0);
    }));
  });

  test('sorting formatted ids by compareEventIds is not string order: 10-0 comes after 9-0', () => {
    const ids = ['10-0', '9-0', '9-10', '9-2'].map((s) => parseEventId(s)!);
    assert.deepEqual(ids.sort(compareEventIds).map(formatEventId), ['9-0', '9-2', '9-10', '10-0']);
  });
});

describe('nextEventId', () => {
  test('the first id takes the clock with seq 0', () => {
    assert.deepEqual(nextEventId(undefined, T0), { ms: T0, seq: 0 });
  });

  test('the clock moved on: its ms with seq 0', () => {
    assert.deepEqual(nextEventId({ ms: T0, seq: 5 }, T0 + 1), { ms: T0 + 1, seq: 0 });
  });

  test('the same millisecond: the next seq', () => {
    assert.deepEqual(nextEventId({ ms: T0, seq: 5 }, T0), { ms: T0, seq: 6 });
  });

  test('a clock that went backwards keeps the last ms and takes the next seq', () => {
    assert.deepEqual(nextEventId({ ms: T0, seq: 5 }, T0 - 60_000), { ms: T0, seq: 6 });
  });

  test('property: strictly increasing under any sequence of clocks, forwards, still or backwards', () => {
    fc.assert(fc.property(
      fc.array(fc.oneof(fc.integer({ min: -100_000, max: 100_000 }), fc.constant(0), fc.integer({ min: -2, max: 2 })), { maxLength: 200 }),
      (steps) => {
        let now = T0;
        let last: EventId | undefined;
        for (const step of steps) {
          now += step;
          const next = nextEventId(last, now);
          if (last !== undefined) {
            assert.ok(compareEventIds(next, last) > 0, `${formatEventId(next)} after ${formatEventId(last)} at ${now}`);
            assert.ok(formatEventId(next) !== formatEventId(last));
          }
          // The id follows the clock whenever the clock is ahead of it, and never runs ahead of the clock's maximum.
          if (last === undefined || now > last.ms) assert.deepEqual(next, { ms: now, seq: 0 });
          else assert.equal(next.ms, last.ms);
          last = next;
        }
      },
    ));
  });
});

describe('compareEventIdStrings', () => {
  test('orders ids as numbers, not as text', () => {
    assert.ok(compareEventIdStrings('10-0', '9-0')! > 0);
    assert.ok(compareEventIdStrings('5-2', '5-10')! < 0);
    assert.equal(compareEventIdStrings('5-2', '5-2'), 0);
  });

  test('an id that does not parse compares as unknown', () => {
    assert.equal(compareEventIdStrings('5-2', 'x'), undefined);
    assert.equal(compareEventIdStrings('', '1-0'), undefined);
  });

  test('property: agrees with compareEventIds on the parsed ids', () => {
    fc.assert(fc.property(eventId, eventId, (a, b) => {
      assert.equal(Math.sign(compareEventIdStrings(formatEventId(a), formatEventId(b))!), Math.sign(compareEventIds(a, b)));
    }));
  });
});

describe('eventIdMs', () => {
  test('is the ms part, and 0 without an id', () => {
    assert.equal(eventIdMs('1732900000123-7'), 1732900000123);
    assert.equal(eventIdMs(undefined), 0);
  });

  test('property: equals the parsed ms', () => {
    fc.assert(fc.property(eventId, (id) => {
      assert.equal(eventIdMs(formatEventId(id)), id.ms);
    }));
  });
});
