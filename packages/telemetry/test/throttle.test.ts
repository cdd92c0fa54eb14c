import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { LogThrottle, suppressedCounts } from '../src/index.ts';

test('at most perSecond lines a second; the next line written says how many were left out', () => {
  const counts = suppressedCounts();
  const t = new LogThrottle(3, 'debug', counts);
  assert.deepEqual([0, 1, 2, 3, 4].map((i) => t.take(1000 + i)), [0, 0, 0, -1, -1]);
  assert.equal(counts.debug, 2);
  assert.equal(t.take(1999), -1);
  assert.equal(t.take(2000), 3, 'the first line of the next second reports the three left out');
  assert.equal(t.take(2001), 0);
  assert.deepEqual(counts, { debug: 3, info: 0, warn: 0 });
});

test('against a model: per one-second window from its first line, never more than the limit, and nothing is lost from the count', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 10 }), fc.array(fc.integer({ min: 0, max: 400 }), { maxLength: 300 }), (limit, gaps) => {
    const counts = suppressedCounts();
    const t = new LogThrottle(limit, 'info', counts);
    let now = 0;
    let windowStart = -Infinity;
    let inWindow = 0;
    let written = 0;
    let reported = 0;
    for (const g of gaps) {
      now += g;
      if (now - windowStart >= 1000) {
        windowStart = now;
        inWindow = 0;
      }
      const r = t.take(now);
      if (inWindow < limit) {
        assert.ok(r >= 0);
        inWindow++;
        written++;
        reported += r;
      } else {
        assert.equal(r, -1);
      }
    }
    assert.equal(counts.info, gaps.length - written);
    // Every left-out line is either reported by a later written line or still pending.
    assert.ok(reported <= counts.info);
  }));
});
