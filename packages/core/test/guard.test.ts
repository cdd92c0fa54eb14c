import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ErrorReasons, isStrike } from '@sluice/protocol';
import { clearStrikes, frameWindowWait, Guard, guardFrame, strike } from '../src/guard.ts';

const L = { hardMaxFrameBytes: 1000, maxFrameBytes: 100, maxMessages: 3, rateWindowMs: 1000 };
const fresh = () => ({ windowStart: 0, windowCount: 0 });

describe('guardFrame', () => {
  test('passes a small text frame within the window', () => {
    assert.equal(guardFrame(fresh(), 10, false, 5000, L), Guard.Pass);
  });

  test('the hard cap comes first and spends no window', () => {
    const s = fresh();
    assert.equal(guardFrame(s, 1001, false, 5000, L), Guard.HardCap);
    assert.equal(s.windowCount, 0);
  });

  test('binary and oversized frames count toward the window, then are refused by kind', () => {
    const s = fresh();
    assert.equal(guardFrame(s, 10, true, 5000, L), Guard.Binary);
    assert.equal(guardFrame(s, 101, false, 5000, L), Guard.TooLarge);
    assert.equal(guardFrame(s, 10, false, 5000, L), Guard.Pass);
    assert.equal(guardFrame(s, 10, false, 5000, L), Guard.RateLimited);
    assert.equal(frameWindowWait(s, 5000, L.rateWindowMs), 1000);
    assert.equal(frameWindowWait(s, 5999, L.rateWindowMs), 1);
  });

  test('the window opens again after rateWindowMs', () => {
    const s = fresh();
    for (let i = 0; i < 3; i++) assert.equal(guardFrame(s, 1, false, 5000, L), Guard.Pass);
    assert.equal(guardFrame(s, 1, false, 5500, L), Guard.RateLimited);
    assert.equal(guardFrame(s, 1, false, 6000, L), Guard.Pass);
  });

  test('property: within one window at most maxMessages frames that are not above the hard cap pass', () => {
    fc.assert(fc.property(
      fc.array(fc.record({ bytes: fc.integer({ min: 0, max: 2000 }), bin: fc.boolean(), dt: fc.integer({ min: 0, max: 5 }) }), { maxLength: 50 }),
      (frames) => {
        const s = fresh();
        let now = 10_000;
        let passed = 0;
        for (const f of frames) {
          now += f.dt;
          const g = guardFrame(s, f.bytes, f.bin, now, L);
          if (g === Guard.Pass) passed++;
          if (f.bytes > L.hardMaxFrameBytes) assert.equal(g, Guard.HardCap);
          else if (g === Guard.Pass) assert.ok(!f.bin && f.bytes <= L.maxFrameBytes);
        }
        // 50 frames within 250 ms: one window.
        assert.ok(passed <= L.maxMessages);
      }));
  });
});

describe('strikes', () => {
  test('WS_MAX_STRIKES rejections in a row that are the socket\'s fault strike it out', () => {
    const s = { strikes: 0 };
    assert.equal(strike(s, 'bad_request', 3), false);
    assert.equal(strike(s, 'forbidden', 3), false);
    assert.equal(strike(s, 'rate_limited', 3), true);
  });

  test('an accepted frame breaks the run', () => {
    const s = { strikes: 0 };
    strike(s, 'bad_request', 3);
    strike(s, 'bad_request', 3);
    clearStrikes(s);
    assert.equal(strike(s, 'bad_request', 3), false);
  });

  test('property: server-side reasons never strike; the count is the run of the socket\'s own faults', () => {
    fc.assert(fc.property(fc.array(fc.oneof(fc.constantFrom(...ErrorReasons), fc.constant('ok' as const)), { maxLength: 40 }),
      fc.integer({ min: 1, max: 6 }), (events, max) => {
        const s = { strikes: 0 };
        let run = 0;
        for (const e of events) {
          if (e === 'ok') {
            clearStrikes(s);
            run = 0;
            continue;
          }
          if (isStrike(e)) run++;
          assert.equal(strike(s, e, max), isStrike(e) && run >= max);
          assert.equal(s.strikes, run);
        }
      }));
  });
});
