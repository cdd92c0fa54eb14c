import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { retryAfterSeconds, retryHint, socketOptions } from '../src/socket-options.ts';

describe('socketOptions', () => {
  test('room above the hard cap, idle after two heartbeats, backpressure above the slow lane', () => {
    const o = socketOptions({ hardMaxFrameBytes: 65536, heartbeatMs: 25000, maxBufferedBytes: 1 << 20 });
    assert.equal(o.maxPayloadLength, 131072);
    assert.equal(o.idleTimeout, 52);
    assert.equal(o.maxBackpressure, 2 * (1 << 20) + 2 * 65536);
    assert.equal(o.closeOnBackpressureLimit, true);
  });

  test('property: idleTimeout is a multiple of 4 in [8, 960], at least two heartbeats when it can be', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 1_000_000 }), (heartbeatMs) => {
      const t = socketOptions({ hardMaxFrameBytes: 1, heartbeatMs, maxBufferedBytes: 1 }).idleTimeout;
      assert.equal(t % 4, 0);
      assert.ok(t >= 8 && t <= 960);
      if (2 * heartbeatMs <= 960_000) assert.ok(t * 1000 >= 2 * heartbeatMs);
    }));
  });

  test('property: maxPayloadLength stays a valid uWS int', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 2 ** 31 }), (hard) => {
      const m = socketOptions({ hardMaxFrameBytes: hard, heartbeatMs: 1000, maxBufferedBytes: 1 }).maxPayloadLength;
      assert.ok(m >= Math.min(hard, 0x7fffffff) && m <= 0x7fffffff);
    }));
  });
});

describe('retry hints', () => {
  test('property: retryHint stays in the configured range', () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: 10000 }), fc.integer({ min: 0, max: 10000 }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      (a, b, r) => {
        const lo = Math.min(a, b);
        const hi = Math.max(a, b);
        const h = retryHint({ retryAfterMinMs: lo, retryAfterMaxMs: hi }, () => r);
        assert.ok(h >= lo && h <= hi);
      }));
  });

  test('retry-after is whole seconds, at least 1', () => {
    assert.equal(retryAfterSeconds(0), '1');
    assert.equal(retryAfterSeconds(1000), '1');
    assert.equal(retryAfterSeconds(1001), '2');
  });
});
