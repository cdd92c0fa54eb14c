import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { hitFixedWindow } from '../src/fixed-window.ts';
import type { FixedWindowState } from '../src/fixed-window.ts';

// The gateway's initial state (shard.ts): zeros, with a wall clock far above windowMs.
const fresh = (): FixedWindowState => ({ windowStart: 0, windowCount: 0 });
const T0 = 1_732_900_000_000;

describe('hitFixedWindow', () => {
  test('the first `limit` frames of a window pass, the next is told the time left in the window', () => {
    const s = fresh();
    for (let i = 0; i < 20; i++) assert.equal(hitFixedWindow(s, T0 + i * 10, 20, 1000), 0, `frame ${i}`);
    assert.equal(hitFixedWindow(s, T0 + 588, 20, 1000), 412);
    assert.equal(hitFixedWindow(s, T0 + 999, 20, 1000), 1);
  });

  test('every frame counts: a refused frame does not reopen the window', () => {
    const s = fresh();
    for (let i = 0; i < 3; i++) hitFixedWindow(s, T0, 3, 1000);
    for (let i = 0; i < 100; i++) assert.ok(hitFixedWindow(s, T0 + i, 3, 1000) > 0);
  });

  test('retryAfterMs is at least 1 even at the last instant of the window', () => {
    const s = fresh();
    hitFixedWindow(s, T0, 1, 10);
    assert.equal(hitFixedWindow(s, T0 + 9, 1, 10), 1);
  });

  test('a new window starts windowMs after the previous one and resets the count', () => {
    const s = fresh();
    for (let i = 0; i < 5; i++) hitFixedWindow(s, T0, 5, 1000);
    assert.ok(hitFixedWindow(s, T0 + 999, 5, 1000) > 0);
    for (let i = 0; i < 5; i++) assert.equal(hitFixedWindow(s, T0 + 1000, 5, 1000), 0);
    assert.equal(hitFixedWindow(s, T0 + 1000, 5, 1000), 1000);
  });

  test('the window starts at the first frame after the previous window, not on a fixed grid', () => {
    const s = fresh();
    hitFixedWindow(s, T0, 1, 1000);
    assert.equal(hitFixedWindow(s, T0 + 1500, 1, 1000), 0);
    assert.equal(hitFixedWindow(s, T0 + 2400, 1, 1000), 100);
  });

  test('limit 0 refuses every frame with the time left in the window', () => {
    const s = fresh();
    assert.equal(hitFixedWindow(s, T0, 0, 1000), 1000);
    assert.equal(hitFixedWindow(s, T0 + 250, 0, 1000), 750);
  });

  test('a clock going backwards does not wedge the window', () => {
    const s = fresh();
    for (let i = 0; i < 3; i++) hitFixedWindow(s, T0, 3, 1000);
    assert.equal(hitFixedWindow(s, T0 + 10, 3, 1000), 990);
    // The clock steps back an hour: the client is never told to wait longer than one window.
    const back = T0 - 3_600_000;
    const wait = hitFixedWindow(s, back, 3, 1000);
    assert.ok(wait <= 1000, `told to wait ${wait} ms`);
    for (let i = 0; i < 3; i++) hitFixedWindow(s, back + 1, 3, 1000);
    assert.equal(hitFixedWindow(s, back + 1000, 3, 1000), 0, 'one window after the step, frames pass again');
  });

  test('property: agrees with a model that records the start of every window', () => {
    const op = fc.record({ dt: fc.integer({ min: 0, max: 1500 }), frames: fc.integer({ min: 1, max: 8 }) });
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 6 }), fc.integer({ min: 1, max: 1000 }), fc.array(op, { maxLength: 60 }),
      (limit, windowMs, ops) => {
        const s = fresh();
        // Model: the start times of all windows so far, and the frames seen in the current one.
        const starts: number[] = [];
        let inWindow = 0;
        let now = T0;
        for (const { dt, frames } of ops) {
          now += dt;
          for (let f = 0; f < frames; f++) {
            const start = starts.at(-1);
            if (start === undefined || now >= start + windowMs) {
              starts.push(now);
              inWindow = 0;
            }
            inWindow++;
            const expected = inWindow <= limit ? 0 : starts.at(-1)! + windowMs - now;
            const got = hitFixedWindow(s, now, limit, windowMs);
            assert.equal(got, expected, `at ${now - T0}, frame ${inWindow} of window ${starts.length}`);
            assert.ok(got === 0 || (got >= 1 && got <= windowMs));
          }
        }
        // Windows never overlap: at most `limit` frames pass per window.
        for (let i = 1; i < starts.length; i++) assert.ok(starts[i]! - starts[i - 1]! >= windowMs);
      },
    ));
  });

  test('property: under any clock, at most `limit` frames pass per window and the wait is within one window', () => {
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 5 }), fc.integer({ min: 1, max: 1000 }),
      fc.array(fc.integer({ min: -5000, max: 5000 }), { minLength: 1, maxLength: 80 }),
      (limit, windowMs, steps) => {
        const s = fresh();
        let now = T0;
        let passedInWindow = 0;
        let lastStart = Number.NaN;
        for (const step of steps) {
          now += step;
          const wait = hitFixedWindow(s, now, limit, windowMs);
          if (s.windowStart !== lastStart) {
            lastStart = s.windowStart;
            passedInWindow = 0;
          }
          if (wait === 0) passedInWindow++;
          else assert.ok(wait >= 1 && wait <= windowMs, `wait ${wait}`);
          assert.ok(passedInWindow <= limit);
          assert.ok(s.windowStart <= now && now < s.windowStart + windowMs, 'the current window holds now');
        }
      },
    ));
  });
});
